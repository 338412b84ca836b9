"""A bound on the requests in the app at once (pure ASGI middleware): past it, 503 at once.

Why: the service does CPU-bound work (embedding, scoring) on a few cores; requests past what
they serve do not go faster for waiting, they queue in the thread pool and every request's
latency grows with the queue, until clients time out. Answering the surplus ``503
overloaded`` with ``Retry-After`` keeps the latency of what is admitted bounded and tells a
client when to come back; nothing of a refused request ran, so any call may be retried.
``/healthz`` and ``/metrics`` pass uncounted: a load balancer and a scraper must see a busy
service as alive.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

OVERLOADED = "overloaded"
EXEMPT_PATHS = frozenset({"/healthz", "/metrics"})


class ConcurrencyLimit:
    """At most ``max_requests`` HTTP requests in the wrapped app at once (0: no bound); the
    others are answered 503 with ``Retry-After: retry_after_s`` before they are read."""

    def __init__(
        self,
        app: ASGIApp,
        max_requests: int,
        *,
        retry_after_s: int = 1,
        exempt: Iterable[str] = EXEMPT_PATHS,
    ) -> None:
        self.app = app
        self.max_requests = max_requests
        self.retry_after_s = retry_after_s
        self.exempt = frozenset(exempt)
        self.in_flight = 0  # one event loop: changed between awaits only

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
        if self.in_flight >= self.max_requests:
            await self._refuse(send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(self, send: Send) -> None:
        message = (
            f"the service is at its limit of {self.max_requests} requests at once "
            "(MEMORY_API__MAX_CONCURRENT_REQUESTS); nothing was done, retry after "
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
