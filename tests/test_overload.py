"""Past its bound on requests at once, ``serve`` answers 503 ``overloaded`` with
``Retry-After`` at once, rather than queueing; ``/healthz`` answers all the same, and the
request holding the slot finishes as it would have.

The slot is held by a real request whose body has not arrived: sent with ``Expect:
100-continue``, the server answers ``100 Continue`` only once the app asks for the body, so the
interim answer says the request is inside the app (past the bound) before the next is sent."""

from __future__ import annotations

import json
import socket
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


def test_a_request_past_the_limit_gets_503_with_retry_after(tmp_path: Path) -> None:
    keys = {"app": ("acme", "user")}
    with serve(tmp_path / "ws", keys, MEMORY_API__MAX_CONCURRENT_REQUESTS="1") as served:
        key = served.keys["app"]
        host, port = served.base_url.removeprefix("http://").split(":")
        body = json.dumps({"user_id": "alice", "facts": [{"text": "Alice keeps bees"}]}).encode()
        with socket.create_connection((host, int(port)), timeout=30) as held:
            held.sendall(
                b"POST /v1/memories HTTP/1.1\r\n"
                + f"Host: {host}\r\nAuthorization: Bearer {key}\r\n".encode()
                + b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
            )
            assert _read_until(held, b"\r\n\r\n").startswith(b"HTTP/1.1 100")  # in the app

            refused = httpx.post(
                f"{served.base_url}/v1/memories/search",
                json={"user_id": "alice", "query": "bees"},
                headers=bearer(key),
                timeout=30,
            )
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "overloaded"
            with MemoryClient(served.base_url, api_key=key, max_retries=0) as client:
                with pytest.raises(ServiceUnavailableError) as raised:
                    client.search("alice", "bees")
                assert raised.value.code == "overloaded"
            assert httpx.get(f"{served.base_url}/healthz", timeout=30).status_code == 200

            held.sendall(body)
            answer = _read_until(held, b'"status":"created"')
            assert answer.startswith(b"HTTP/1.1 200")

        found = httpx.post(
            f"{served.base_url}/v1/memories/search",
            json={"user_id": "alice", "query": "bees"},
            headers=bearer(key),
            timeout=30,
        )
        assert found.status_code == 200
        assert [h["text"] for h in found.json()["hits"]] == ["Alice keeps bees"]
