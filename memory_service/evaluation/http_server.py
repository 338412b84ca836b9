"""The real API app served by uvicorn on a loopback port, in a thread of this process.

In-process, so the server shares the backend the benchmark just filled: a second process
would have to re-embed every fact to rebuild the files backend's derived index.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from pathlib import Path

from memory_service.domain.errors import BackendUnavailableError


def write_key_file(path: Path, tenant: str) -> str:
    """A keys file holding one fresh user key for ``tenant``; returns the key."""
    key = "msk_bench_" + secrets.token_urlsafe(24)
    path.write_text(json.dumps({key: {"tenant": tenant, "role": "user"}}), encoding="utf-8")
    path.chmod(0o600)
    return key


class LoopbackServer:
    """``with LoopbackServer(app) as base_url:`` serves ``app`` on 127.0.0.1, a free port."""

    def __init__(self, app: object, *, start_timeout_s: float = 30.0) -> None:
        import uvicorn

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Accepted connections inherit this. Without it every response waited ~40 ms
        # (Nagle against delayed ACK) on a socket handed to uvicorn: measured, not guessed.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._timeout = start_timeout_s
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="bench-http",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__()
                raise BackendUnavailableError("the benchmark's HTTP server did not start")
            time.sleep(0.02)
        return self.base_url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self._socket.close()
