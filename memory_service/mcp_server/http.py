"""``/mcp`` on ``serve``: the MCP server over streamable HTTP, behind the API's own keys.

Every request is authenticated as the API authenticates it (``Authorization: Bearer <key>``
or ``X-API-Key``, looked up in the same key ring, so a revoked key stops working here too);
a missing or unknown key is a 401 with the API's error body before any MCP message is read.
The tenant is the key's; the user a user key acts for is the ``X-Memory-User`` header.
The transport is stateless (JSON responses, no server-side session): each request carries
its key, so a session cannot outlive a revoked key or be borrowed by another one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_service.api.keys import ApiKeyRing, Principal
from memory_service.errors import MemoryServiceError
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.services.container import Services

MCP_PATH = "/mcp"
USER_HEADER = "x-memory-user"
_PRINCIPAL = "mcp_principal"
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_HOW = "send 'Authorization: Bearer <key>'"


def _key_of(headers: dict[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key") or None


class ApiKeyGate:
    """ASGI middleware: the caller's ``Principal`` into the request state, or a 401."""

    def __init__(self, app: ASGIApp, ring: ApiKeyRing) -> None:
        self.app, self.ring = app, ring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
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
            await _refuse(send, 401, "unauthorized", message)
            return
        scope.setdefault("state", {})[_PRINCIPAL] = principal
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    """The API's error body, before any MCP message is read."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
    app.router.routes.append(Route(MCP_PATH, ApiKeyGate(StreamableHTTPASGIApp(manager), ring)))
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with manager.run(), inner(a) as state:
            yield state

    app.router.lifespan_context = lifespan
