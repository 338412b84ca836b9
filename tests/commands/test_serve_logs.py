"""Structured logs and trace ids: ``serve`` as a user runs it, its log lines parsed as JSON.

Each request runs under the trace of its W3C ``traceparent`` header (or a new one), answers a
``traceparent`` naming this service's span, and every line it causes (the request line, the
flush, the compaction, the maintenance) carries that ``trace_id``; no line at INFO carries the
API key, a fact's text or a message's content.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.observe.tracing import parse_traceparent
from memory_service.services import build_services
from tests.support.llm_server import text
from tests.support.server import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[2]
KEY = "acme-key-0123456789abcdef"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SECRET = "locker code 7391 zebra"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"00-{TRACE}-{PARENT}",  # no flags
        f"00-{TRACE.upper()}-{PARENT}-01",  # hex must be lower case
        f"ff-{TRACE}-{PARENT}-01",  # version ff is invalid
        f"00-{'0' * 32}-{PARENT}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent span
        f"00-{TRACE}x-{PARENT}-01",
    ],
)
def test_a_malformed_traceparent_is_ignored(header):
    assert parse_traceparent(header) is None


def test_a_valid_traceparent_keeps_the_trace_and_opens_a_span():
    trace = parse_traceparent(f"00-{TRACE}-{PARENT}-01")
    assert trace.trace_id == TRACE and trace.parent_id == PARENT
    assert re.fullmatch(r"[0-9a-f]{16}", trace.span_id) and trace.span_id != PARENT


@pytest.fixture
def client(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing({KEY: {"tenant": "acme", "role": "user"}})
    with TestClient(create_app(services, ring)) as test_client:
        yield test_client
    services.close()


def _answered(response) -> tuple[str, str]:
    version, trace_id, span_id, flags = response.headers["traceparent"].split("-")
    assert (version, flags) == ("00", "01")
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id) and re.fullmatch(r"[0-9a-f]{16}", span_id)
    return trace_id, span_id


def test_every_response_names_its_trace(client):
    sent = client.get("/healthz", headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
    trace_id, span_id = _answered(sent)
    assert trace_id == TRACE and span_id != PARENT

    first, second = _answered(client.get("/healthz")), _answered(client.get("/healthz"))
    assert first[0] != second[0]  # none sent: a new trace each time

    malformed = client.get("/healthz", headers={"traceparent": f"00-{'0' * 32}-{PARENT}-01"})
    assert _answered(malformed)[0] != "0" * 32
    # errors carry it too, including the 413 answered before any route runs
    assert _answered(client.get("/v1/memories", params={"user_id": "alice"}))
    big = client.post(
        "/v1/memories",
        content=b"x" * (17 * 1024 * 1024),
        headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    assert big.status_code == 413 and _answered(big)


def _serve(workspace: Path, port: int, llm_url: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(REPO),
        MEMORY_WORKSPACE=str(workspace),
        MEMORY_LLM__BASE_URL=llm_url,
        MEMORY_LLM__MODEL="chat-model",
        MEMORY_LLM__MAX_RETRIES="0",
        MEMORY_OBSERVABILITY__LOG_FORMAT="json",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.subprocess
def test_serve_logs_json_lines_under_the_request_trace_without_secrets(
    tmp_path, llm_server, script
):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(tmp_path / "ws", port, llm_server.base_url)
    try:
        banner = proc.stdout.readline()
        key = re.search(r"development key for tenant 'default': (\S+)", banner).group(1)
        wait_healthy(base)
        auth = {"Authorization": f"Bearer {key}"}

        def call(method: str, path: str, trace: str, **kwargs) -> httpx.Response:
            headers = {**auth, "traceparent": f"00-{trace}-{PARENT}-01"}
            response = httpx.request(method, f"{base}{path}", headers=headers, timeout=60, **kwargs)
            assert response.status_code == 200, response.text
            assert response.headers["traceparent"].split("-")[1] == trace
            return response

        record_trace, chat_trace, compact_trace, maintain_trace = (
            f"{n:032x}" for n in (0xA1, 0xB2, 0xC3, 0xD4)
        )
        call(
            "POST",
            "/v1/memories",
            record_trace,
            json={"user_id": "alice", "facts": [{"text": f"Alice's {SECRET}"}]},
        )
        call(
            "POST", "/v1/memories/search", record_trace, json={"user_id": "alice", "query": SECRET}
        )
        script.chat(text("Noted."))
        script.flush(text(f"- [fact|8|user.locker] The user's {SECRET} is new."))
        call(
            "POST",
            "/v1/chat",
            chat_trace,
            json={"user_id": "alice", "session_id": "s1", "message": f"My {SECRET}."},
        )
        # a reply that is neither bullets nor NO_REPLY, twice: the flush fails, and its error
        # (which quotes the reply) goes to the dead letter, not to the log
        script.chat(text("Noted again."))
        script.flush(text(f"The user's {SECRET}."), text(f"The user's {SECRET}!"))
        call(
            "POST",
            "/v1/chat",
            chat_trace,
            json={"user_id": "alice", "session_id": "s1", "message": "And my bike."},
        )
        call(
            "POST",
            "/v1/sessions/s1/compact",
            compact_trace,
            json={"user_id": "alice", "keep_last": 1},
        )
        call(
            "POST", "/v1/maintenance/run", maintain_trace, json={"user_id": "alice", "force": True}
        )
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)

    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line JSON
    assert lines, err
    for entry in lines:
        assert {"ts", "level", "logger", "message", "trace_id", "span_id"} <= set(entry)
    leaked = [e for e in lines if SECRET in json.dumps(e) or key in json.dumps(e)]
    assert leaked == []

    def traced(trace: str) -> list[dict]:
        return [e for e in lines if e["trace_id"] == trace]

    requests = [e for e in lines if e["logger"] == "memory_service.access"]
    assert {(e["route"], e["status"], e["trace_id"]) for e in requests} >= {
        ("/v1/memories", 200, record_trace),
        ("/v1/memories/search", 200, record_trace),
        ("/v1/chat", 200, chat_trace),
        ("/v1/sessions/{session_id}/compact", 200, compact_trace),
        ("/v1/maintenance/run", 200, maintain_trace),
    }
    assert all(
        e["duration_ms"] > 0 and e["method"] == "POST"
        for e in requests
        if e["trace_id"] in (record_trace, chat_trace)
    )
    flushes = [
        e for e in traced(chat_trace) if e["message"].startswith("flush of default/alice/s1")
    ]
    assert [e["level"] for e in flushes] == ["INFO", "ERROR"], flushes  # flushed, then failed
    assert any(
        e["message"].startswith("compaction of default/alice/s1") for e in traced(compact_trace)
    )
    assert any(
        e["message"].startswith("maintenance of default/alice") for e in traced(maintain_trace)
    )


def test_the_access_log_is_one_line_per_request_unless_turned_off(
    tmp_path, embedder, monkeypatch, caplog
):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    ring = ApiKeyRing({KEY: {"tenant": "acme", "role": "user"}})
    for access_log, expected in ((True, 2), (False, 0)):
        settings = load_settings(
            workspace=tmp_path / f"ws-{access_log}", observability={"access_log": access_log}
        )
        services = build_services(settings, embedder=embedder)
        try:
            with TestClient(create_app(services, ring)) as client, caplog.at_level("INFO"):
                caplog.clear()
                client.get("/healthz")
                client.get("/v1/memories/abc", params={"user_id": "a"}, headers={"X-API-Key": KEY})
                lines = [r for r in caplog.records if r.name == "memory_service.access"]
        finally:
            services.close()
        assert len(lines) == expected
        if expected:
            assert [(r.route, r.status) for r in lines] == [
                ("/healthz", 200),
                ("/v1/memories/{memory_id}", 404),
            ]
            assert "abc" not in " ".join(r.getMessage() for r in lines)
