"""Each request under its trace, counted and logged once (pure ASGI middleware).

The trace comes from the caller's W3C ``traceparent`` header (a malformed one is ignored and a
new trace starts); the response names this service's span in its own ``traceparent`` header.
The request's metrics go to the app's ``AppMetrics`` under the route *template*
(``/v1/memories/{fact_id}``), never the raw path, so ids do not explode the label set; the
log line names the same template, the status and the time, never the query or the body.
An unexpected error is answered here (500 ``internal_error``) and its traceback logged once,
at ERROR under the request's trace.
"""

from __future__ import annotations

import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_service.api.metrics import AppMetrics
from memory_service.observe.foreground import FOREGROUND
from memory_service.observe.logs import mark_logged
from memory_service.observe.telemetry import NULL_SINK, using_sink
from memory_service.observe.tracing import trace_from_header, using_trace

log = logging.getLogger("memory_service.access")
log_errors = logging.getLogger("memory_service.api.errors")

_INTERNAL_ERROR = json.dumps(
    {"error": {"code": "internal_error", "message": "internal server error"}}
).encode()

UNMATCHED = "unmatched"  # the route label of a path no route serves (404s of scanners)


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    return getattr(route, "path", None) or UNMATCHED


class RequestObservability:
    """Trace, metrics (``metrics`` None: turned off) and one access log line per request
    (``log_requests``)."""

    def __init__(
        self, app: ASGIApp, metrics: AppMetrics | None, *, log_requests: bool = True
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.log_requests = log_requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"traceparent":
                header = value.decode("latin-1")
                break
        trace = trace_from_header(header)
        traceparent = trace.traceparent().encode()
        status = 500  # unless the app answers: an exception escaping here is a 500
        started = False

        async def traced_send(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = int(message["status"]), True
                message["headers"] = [*message.get("headers", ()), (b"traceparent", traceparent)]
            await send(message)

        start = time.perf_counter()
        with using_trace(trace), using_sink(self.metrics or NULL_SINK), FOREGROUND.call():
            try:
                await self.app(scope, receive, traced_send)
            except Exception as exc:
                # Logged here, once, under the request's trace; answered here too, so the
                # server never logs the same traceback again (``LoggedOnce`` drops its line
                # where a streamed answer had begun and the connection can only be cut).
                log_errors.exception(
                    "unhandled error in %s %s", scope.get("method", ""), route_template(scope)
                )
                mark_logged(exc)
                if started:
                    raise
                await _answer_internal_error(traced_send)
            finally:
                seconds = time.perf_counter() - start
                route, method = route_template(scope), scope.get("method", "")
                if self.metrics is not None:
                    self.metrics.request(method, route, status, seconds)
                if self.log_requests:
                    self._log(method, route, status, seconds)

    @staticmethod
    def _log(method: str, route: str, status: int, seconds: float) -> None:
        log.info(
            "%s %s %d %.1f ms",
            method,
            route,
            status,
            seconds * 1000,
            extra={
                "method": method,
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 3),
            },
        )


async def _answer_internal_error(send: Send) -> None:
    """The 500 of an unexpected error, in the error envelope every answer has."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_INTERNAL_ERROR)).encode()),
    ]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": _INTERNAL_ERROR})
