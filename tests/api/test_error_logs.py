"""An unexpected error (a bug) is a 500 in the error envelope, with the request's
``traceparent``; its traceback is logged once, at ERROR, under the request's trace id: not
once by the service without the trace and again by the server (``uvicorn.error``). A 503 the
deployment chose (no model configured) is logged below ERROR."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.observe.logs import LoggedOnce, TraceFilter
from memory_service.services import build_services
from tests.support.api import KEYS, auth
from tests.support.server import free_port

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


class Kept(logging.Handler):
    """The records a service's own log handler would write (its filters applied)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(TraceFilter())
        self.addFilter(LoggedOnce())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Kept]:
    root = logging.getLogger()
    handler, level = Kept(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def served(tmp_path, embedder, monkeypatch) -> Iterator[tuple[str, object]]:
    """The app under a real uvicorn server (in a thread): the server's own error logging is
    part of what is checked."""
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    port = free_port()
    config = uvicorn.Config(
        create_app(services, ApiKeyRing(KEYS)),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", services
    finally:
        server.should_exit = True
        thread.join(30)
        services.close()


def _boom(*_args, **_kwargs):
    raise RuntimeError("a bug")


def test_a_500_is_logged_once_at_error_under_its_trace(served, kept, monkeypatch):
    base_url, services = served
    monkeypatch.setattr(services.longterm, "retrieve", _boom)
    response = httpx.post(
        f"{base_url}/v1/memories/search",
        json={"user_id": "alice", "query": "anything"},
        headers={**auth(), "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"},
        timeout=30,
    )
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal server error"}
    }
    assert response.headers["traceparent"].split("-")[1] == TRACE

    time.sleep(0.2)  # the server thread's last lines
    errors = [r for r in kept.records if r.levelno >= logging.ERROR]
    assert errors, [r.getMessage() for r in kept.records]
    assert {r.trace_id for r in errors} == {TRACE}, [(r.name, r.trace_id) for r in errors]
    tracebacks = [r for r in kept.records if r.exc_info]
    assert len(tracebacks) == 1, [(r.name, r.getMessage()) for r in tracebacks]
    assert tracebacks[0].name == "memory_service.api.errors"
    access = [r for r in kept.records if r.name == "memory_service.access"]
    assert [(r.status, r.trace_id) for r in access] == [(500, TRACE)]


def test_no_model_is_a_503_logged_as_a_warning(served, kept):
    base_url, _ = served
    response = httpx.post(
        f"{base_url}/v1/chat",
        json={"user_id": "alice", "session_id": "s1", "message": "hello"},
        headers=auth(),
        timeout=30,
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "llm_not_configured"
    time.sleep(0.1)
    said = [r for r in kept.records if "llm_not_configured" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING]
    assert not [r for r in kept.records if r.levelno >= logging.ERROR]
