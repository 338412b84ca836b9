"""``memory-service mcp``: the memory tools over MCP on stdio (``serve`` has them at ``/mcp``)."""

from __future__ import annotations

import argparse
import os

from memory_service.domain.context import validate_id
from memory_service.domain.errors import ConfigurationError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "mcp",
        help="serve the memory tools over MCP on stdio (key: MEMORY_API_KEY)",
        description="The MCP server on stdin/stdout, for desktop agents. The API key comes "
        "from MEMORY_API_KEY and is checked against the API keys file; the tenant is the "
        "key's. serve offers the same tools over streamable HTTP at /mcp.",
    )
    parser.add_argument(
        "--user",
        default=os.environ.get("MEMORY_MCP_USER"),
        help="the user the tools act for (default: MEMORY_MCP_USER); an admin key's tools "
        "may also name a user; a personal key's user needs no flag",
    )
    parser.add_argument(
        "--tenant",
        default=os.environ.get("MEMORY_MCP_TENANT"),
        help="refuse to start unless the key belongs to this tenant (default: MEMORY_MCP_TENANT)",
    )
    parser.add_argument("--workspace", help="workspace (default: MEMORY_WORKSPACE or ./data)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    from memory_service.api.keys import ApiKeyRing, postgres_key_ring
    from memory_service.commands.common import settings_from
    from memory_service.mcp_server.stdio import KEY_VARIABLE, authenticate, serve_stdio
    from memory_service.services.container import build_services
    from memory_service.stores.build import keys_file

    settings = settings_from(args)
    if args.user is not None:
        validate_id(args.user, "user")
    key = os.environ.get(KEY_VARIABLE)
    if settings.state_in_postgres:  # the keys are in the state database: open it first
        services = build_services(settings)
        try:
            assert services.database is not None  # state in PostgreSQL: built first
            ring = postgres_key_ring(settings, services.database)
            caller = authenticate(ring, key, tenant=args.tenant, user=args.user)
        except BaseException:
            services.close()
            raise
    else:
        path = keys_file(settings)
        if not path.exists():
            raise ConfigurationError(
                f"no API keys file at {path}: add a key with memory-service keys add"
            )
        caller = authenticate(ApiKeyRing.from_file(path), key, tenant=args.tenant, user=args.user)
        services = build_services(settings)
    try:
        anyio.run(serve_stdio, services, caller)
    finally:
        services.close()
    return 0
