"""Past its bound on requests at once and on those waiting for a turn, ``serve`` answers 503
``overloaded`` with ``Retry-After`` at once; a request within the wait bound waits and is
answered; ``/healthz`` answers all the same, and the request holding the slot finishes as it
would have.

The slot is held by a real request whose body has not arrived: sent with ``Expect:
100-continue``, the server answers ``100 Continue`` only once the app asks for the body, so the
interim answer says the request is inside the app (past the bound) before the next is sent."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from memory_service.client import MemoryClient, ServiceUnavailableError
from tests.support.server import bearer, serve

pytestmark = pytest.mark.subprocess  # starts `memory-service serve`


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    got = b""
    while marker not in got:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before {marker!r}: {got!r}")
        got += chunk
    return got


@contextmanager
def _holding_the_slot(base_url: str, key: str) -> Iterator[socket.socket]:
    """A record request inside the app, waiting for its body: send the body on the socket
    yielded to let it finish."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as held:
        held.sendall(
            b"POST /v1/memories HTTP/1.1\r\n"
            + f"Host: {host}\r\nAuthorization: Bearer {key}\r\n".encode()
            + b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
            + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
        )
        assert _read_until(held, b"\r\n\r\n").startswith(b"HTTP/1.1 100")  # in the app
        yield held


BODY = json.dumps({"user_id": "alice", "facts": [{"text": "Alice keeps bees"}]}).encode()


def _search(base_url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/memories/search",
        json={"user_id": "alice", "query": "bees"},
        headers=bearer(key),
        timeout=60,
    )


def test_a_request_past_the_limit_gets_503_with_retry_after(tmp_path: Path) -> None:
    keys = {"app": ("acme", "user")}
    limits = {"MEMORY_API__MAX_CONCURRENT_REQUESTS": "1", "MEMORY_API__MAX_WAITING_REQUESTS": "0"}
    with serve(tmp_path / "ws", keys, **limits) as served:
        key = served.keys["app"]
        with _holding_the_slot(served.base_url, key) as held:
            refused = _search(served.base_url, key)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "overloaded"
            with MemoryClient(served.base_url, api_key=key, max_retries=0) as client:
                with pytest.raises(ServiceUnavailableError) as raised:
                    client.search("alice", "bees")
                assert raised.value.code == "overloaded"
            assert httpx.get(f"{served.base_url}/healthz", timeout=30).status_code == 200

            held.sendall(BODY)
            answer = _read_until(held, b'"status":"created"')
            assert answer.startswith(b"HTTP/1.1 200")

        found = _search(served.base_url, key)
        assert found.status_code == 200
        assert [h["text"] for h in found.json()["hits"]] == ["Alice keeps bees"]


def test_a_request_within_the_wait_bound_waits_for_its_turn(tmp_path: Path) -> None:
    """One slot, one place to wait: of two searches sent while the slot is held, one waits
    and the other is refused (whichever arrived second); once the slot is free the waiting
    one is answered."""
    keys = {"app": ("acme", "user")}
    limits = {"MEMORY_API__MAX_CONCURRENT_REQUESTS": "1", "MEMORY_API__MAX_WAITING_REQUESTS": "1"}
    with serve(tmp_path / "ws", keys, **limits) as served:
        key = served.keys["app"]
        answers: list[httpx.Response] = []
        first_answer = threading.Event()

        def ask() -> None:
            answers.append(_search(served.base_url, key))
            first_answer.set()

        with _holding_the_slot(served.base_url, key) as held:
            askers = [threading.Thread(target=ask) for _ in range(2)]
            for asker in askers:
                asker.start()
            assert first_answer.wait(timeout=60)  # the refusal: the other is still waiting
            assert [a.status_code for a in answers] == [503]
            held.sendall(BODY)
            assert _read_until(held, b'"status":"created"').startswith(b"HTTP/1.1 200")
            for asker in askers:
                asker.join(timeout=60)
        assert [a.status_code for a in answers] == [503, 200]
        assert [h["text"] for h in answers[1].json()["hits"]] == ["Alice keeps bees"]


def _refusals(base_url: str) -> float:
    """The 503s the server counted (``/metrics``, which the bound never refuses)."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("memory_http_requests_total{") and 'status="503"' in line
    )


def test_the_client_retries_a_refused_search_after_retry_after(tmp_path: Path) -> None:
    """A refused request did nothing, so the client sends it again, a POST too, after the
    ``Retry-After`` the service asked for; it succeeds once the slot is free."""
    keys = {"app": ("acme", "user")}
    limits = {"MEMORY_API__MAX_CONCURRENT_REQUESTS": "1", "MEMORY_API__MAX_WAITING_REQUESTS": "0"}
    with serve(tmp_path / "ws", keys, **limits) as served:
        key = served.keys["app"]
        found: list[object] = []
        with _holding_the_slot(served.base_url, key) as held:
            client = MemoryClient(served.base_url, api_key=key, max_retries=5)
            asker = threading.Thread(target=lambda: found.append(client.search("alice", "bees")))
            asker.start()
            for _ in range(600):  # bounded: until the server has refused it once
                if _refusals(served.base_url) >= 1:
                    break
                threading.Event().wait(0.01)
            assert _refusals(served.base_url) >= 1
            held.sendall(BODY)
            assert _read_until(held, b'"status":"created"').startswith(b"HTTP/1.1 200")
            asker.join(timeout=60)
            client.close()
        assert [h.text for h in found[0].hits] == ["Alice keeps bees"]  # type: ignore[attr-defined]
