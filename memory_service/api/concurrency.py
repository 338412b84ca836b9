"""A bound on the requests in the app at once, and on those waiting for a turn (pure ASGI
middleware): past both, 503 at once.

Why: the service does CPU-bound work (embedding, scoring) in one process on a few cores;
more requests in the app at once do not answer more per second, they share the GIL and the
cores and every request's latency grows with their number, until clients time out. A few in
the app and the rest waiting in order keeps the cores busy without that contention; a bounded
wait answers the surplus ``503 overloaded`` with ``Retry-After``, so the latency of what is
admitted stays bounded and a client learns when to come back (nothing of a refused request
ran: any call may be retried). ``/healthz`` and ``/metrics`` pass uncounted: a load balancer
and a scraper must see a busy service as alive.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

OVERLOADED = "overloaded"
EXEMPT_PATHS = frozenset({"/healthz", "/metrics"})


class ConcurrencyLimit:
    """At most ``max_requests`` HTTP requests in the wrapped app at once (0: no bound) and
    ``max_waiting`` more waiting for a turn, first come first served; the others are
    answered 503 with ``Retry-After: retry_after_s`` before they are read."""

    def __init__(
        self,
        app: ASGIApp,
        max_requests: int,
        *,
        max_waiting: int = 0,
        retry_after_s: int = 1,
        exempt: Iterable[str] = EXEMPT_PATHS,
    ) -> None:
        self.app = app
        self.max_requests = max_requests
        self.max_waiting = max_waiting
        self.retry_after_s = retry_after_s
        self.exempt = frozenset(exempt)
        self.in_flight = 0  # one event loop: both change between awaits only
        self.waiting = 0
        self._turns: asyncio.Semaphore | None = None  # made on the serving loop

    def _counted(self, scope: Scope) -> bool:
        if scope["type"] != "http" or self.max_requests <= 0:
            return False
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return path.rstrip("/") not in self.exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._counted(scope):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_requests and self.waiting >= self.max_waiting:
            await self._refuse(send)
            return
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.max_requests)
        self.waiting += 1
        try:
            await self._turns.acquire()  # FIFO: asyncio wakes waiters in order
        finally:
            self.waiting -= 1
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self._turns.release()

    async def _refuse(self, send: Send) -> None:
        message = (
            f"the service is at its limit of {self.max_requests} requests at once and "
            f"{self.max_waiting} waiting (MEMORY_API__MAX_CONCURRENT_REQUESTS, "
            "MEMORY_API__MAX_WAITING_REQUESTS); nothing was done, retry after "
            f"{self.retry_after_s}s"
        )
        body = json.dumps({"error": {"code": OVERLOADED, "message": message}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(self.retry_after_s).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
