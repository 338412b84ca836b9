"""``memory-service mcp``: the MCP server over stdio, for desktop agents.

The key comes from the environment and is looked up in the API's key store, like the HTTP
API: no key, or an unknown one, and the server does not start. The process serves one caller,
so the caller (tenant from the key, the user from ``--user``, or a personal key's own user) is
fixed at start.
"""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from memory_service.api.keys import ApiKeyRing
from memory_service.domain.errors import ConfigurationError
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.services.container import Services

KEY_VARIABLE = "MEMORY_API_KEY"


def authenticate(
    ring: ApiKeyRing, key: str | None, *, tenant: str | None, user: str | None
) -> Caller:
    """The caller of ``key``; a ``tenant`` given as well must be the key's own."""
    if not key:
        raise ConfigurationError(f"no API key: set {KEY_VARIABLE} (see memory-service keys add)")
    principal = ring.lookup(key)
    if principal is None:
        raise ConfigurationError(f"{KEY_VARIABLE}: unknown API key")
    if tenant is not None and tenant != principal.tenant_id:
        raise ConfigurationError(
            f"the API key belongs to tenant {principal.tenant_id!r}, not {tenant!r}"
        )
    if principal.user_id is not None:
        if user is not None and user != principal.user_id:
            raise ConfigurationError(
                f"{KEY_VARIABLE}: the API key is bound to user {principal.user_id!r}, "
                f"not {user!r} (leave --user out)"
            )
        return Caller(principal, principal.user_id)
    caller = Caller(principal, user)
    if user is None and not caller.may_choose_user:
        raise ConfigurationError("an application key acts for one user: name it with --user")
    return caller


async def serve_stdio(services: Services, caller: Caller) -> None:
    server = build_server(services, lambda _ctx: caller)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
