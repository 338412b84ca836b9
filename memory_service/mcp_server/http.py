"""``/mcp`` on ``serve``: the MCP server over streamable HTTP, behind the API's own keys.

Every request is authenticated as the API authenticates it (``Authorization: Bearer <key>``
or ``X-API-Key``, looked up in the same key ring, so a revoked key stops working here too);
a missing or unknown key is a 401 with the API's error body before any MCP message is read.
The tenant is the key's; the user a user key acts for is the ``X-Memory-User`` header.
The transport is stateless (JSON responses, no server-side session): each request carries
its key, so a session cannot outlive a revoked key or be borrowed by another one. So the
endpoint takes only ``POST``: with no session there is no server-to-client stream to open
(a ``GET`` for one would be answered 200 and then never sent anything), and the protocol's
answer for that is a 405, which the SDK clients take as "no stream here".

What the endpoint refuses leaves as the API's error body, as the 401 does: the SDK's own
plain-text refusals (an unknown ``Host`` 421, ``Origin`` 403, a body not sent as JSON 400)
are rewritten; its JSON-RPC error bodies (a malformed message, a wrong ``Accept``) are the
protocol's and pass as they are. Requests are counted and logged under the route ``/mcp``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_service.api.keys import ApiKeyRing, Principal
from memory_service.domain.errors import MemoryServiceError
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.services.container import Services

MCP_PATH = "/mcp"
USER_HEADER = "x-memory-user"
_PRINCIPAL = "mcp_principal"
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_HOW = "send 'Authorization: Bearer <key>'"

# The SDK's plain-text refusals, as the API would name them (by status where it is unknown).
_TRANSPORT_ERRORS = {
    "Invalid Host header": (
        "invalid_host",
        "Invalid Host header: serve on a loopback address answers MCP for the hosts "
        "127.0.0.1, localhost and [::1] only (DNS-rebinding protection)",
    ),
    "Invalid Origin header": (
        "invalid_origin",
        "Invalid Origin header: serve on a loopback address answers MCP from the origins "
        "http://127.0.0.1, http://localhost and http://[::1] only (DNS-rebinding protection)",
    ),
    "Invalid Content-Type header": (
        "invalid_content_type",
        "Invalid Content-Type header: send the JSON-RPC message as application/json",
    ),
}
_STATUS_CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    421: "misdirected_request",
}


def _key_of(headers: dict[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key") or None


class ApiKeyGate:
    """ASGI middleware: ``POST`` only (a 405 otherwise), then the caller's ``Principal`` into
    the request state, or a 401."""

    def __init__(self, app: ASGIApp, ring: ApiKeyRing) -> None:
        self.app, self.ring = app, ring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            message = (
                f"{scope['method']} {MCP_PATH}: this endpoint is stateless and opens no event "
                "stream; send each JSON-RPC message with POST"
            )
            await _refuse(send, 405, "method_not_allowed", message, [(b"allow", b"POST")])
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        key = _key_of(headers)
        try:
            principal = self.ring.lookup(key) if key else None
        except MemoryServiceError as exc:  # keys in PostgreSQL, unreachable: the API's 503
            await _refuse(send, exc.http_status, exc.code, exc.message)
            return
        if principal is None:
            message = "unknown API key" if key else f"missing API key: {_HOW}"
            await _refuse(send, 401, "unauthorized", message, [(b"www-authenticate", b"Bearer")])
            return
        scope.setdefault("state", {})[_PRINCIPAL] = principal
        await self.app(scope, receive, send)


async def _refuse(
    send: Send,
    status: int,
    code: str,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """The API's error body, before any MCP message is read."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            return b"json" in value.lower()
    return False


class JsonErrors:
    """ASGI middleware: an error response of the transport that is not JSON (the SDK's
    plain-text refusals) leaves as the API's error body, its status and other headers kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: Message | None = None  # a plain-text error's start, until its body is read
        body = bytearray()

        async def rewriting_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                if message["status"] >= 400 and not _is_json(message.get("headers", [])):
                    held = message
                    return
            elif held is not None and message["type"] == "http.response.body":
                body.extend(message.get("body", b""))
                if message.get("more_body", False):
                    return
                status, start, held = held["status"], held, None
                text = body.decode("utf-8", "replace").strip()
                code, said = _TRANSPORT_ERRORS.get(
                    text, (_STATUS_CODES.get(status, "http_error"), text or f"HTTP {status}")
                )
                kept = [
                    (name, value)
                    for name, value in start.get("headers", [])
                    if name.lower() not in (b"content-type", b"content-length")
                ]
                await _refuse(send, status, code, said, kept)
                return
            await send(message)

        await self.app(scope, receive, rewriting_send)


class McpRoute(Route):
    """``/mcp``, named in the request's scope as FastAPI names its own routes: the access log
    and the metrics count its requests under ``/mcp``, not as ``unmatched``."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def caller_of(ctx: Any) -> Caller:
    """The caller of one HTTP request, as the gate found it."""
    request: Request = ctx.request
    principal: Principal = request.state.mcp_principal
    return Caller(principal, request.headers.get(USER_HEADER) or None)


def _security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection when serving on loopback (as the SDK itself does)."""
    if host not in _LOCAL_HOSTS:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def mount_mcp(app: Any, services: Services, ring: ApiKeyRing, *, host: str) -> None:
    """Serve MCP at ``/mcp`` on ``app`` (the API's FastAPI app), started with its lifespan."""
    manager = StreamableHTTPSessionManager(
        app=build_server(services, caller_of),
        json_response=True,
        stateless=True,
        security_settings=_security(host),
    )
    transport = JsonErrors(StreamableHTTPASGIApp(manager))
    app.router.routes.append(McpRoute(MCP_PATH, ApiKeyGate(transport, ring)))
    # the SDK's per-request lines (a stateless transport "terminating session None" after
    # each one, the manager's start and stop) would drown the access log; warnings still show
    for name in ("mcp.server.streamable_http", "mcp.server.streamable_http_manager"):
        logging.getLogger(name).setLevel(logging.WARNING)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with manager.run(), inner(a) as state:
            yield state

    app.router.lifespan_context = lifespan
