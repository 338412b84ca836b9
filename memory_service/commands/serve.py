"""``memory-service serve``: the HTTP API on the configured backends."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory_service.api.keys import KeySource


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="run the HTTP API")
    parser.add_argument("--host", help="bind address (default: MEMORY_API__HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: MEMORY_API__PORT or 8080)")
    parser.add_argument("--workspace", help="workspace (default: MEMORY_WORKSPACE or ./data)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from memory_service.api import create_app
    from memory_service.api.keys import load_key_ring
    from memory_service.commands.common import settings_from
    from memory_service.mcp_server.http import mount_mcp
    from memory_service.services import build_scheduler, build_services

    settings = settings_from(args)
    host = args.host or settings.api.host
    port = args.port or settings.api.port
    settings.workspace.mkdir(parents=True, exist_ok=True)
    keys = load_key_ring(settings)
    services = build_services(settings)
    app = create_app(services, keys.ring)
    mount_mcp(app, services, keys.ring, host=host)
    print(banner(f"http://{host}:{port}", services.describe_storage(), keys), flush=True)
    scheduler = build_scheduler(services, app.state.maintenance, keys.ring.tenants)
    scheduler.start()
    config = uvicorn.Config(app, host=host, port=port, log_level="info")
    # The banner says where it listens: uvicorn's own start and stop lines would repeat it.
    # Its warnings and errors (a port in use) still show, and so does the access log.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    # and the MCP session manager's start and stop lines (at /mcp) would join them
    logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)
    try:
        uvicorn.Server(config).run()
    finally:
        scheduler.stop()
        services.close()
    return 0


def banner(url: str, storage: str, keys: KeySource) -> str:
    """The one line ``serve`` prints at start (the README shows it)."""
    count = len(keys.ring)
    origin = f"{keys.path} ({count} key{'s' if count != 1 else ''})"
    if keys.created_dev_key:
        origin = (
            f"{keys.path}, new development key for tenant 'default': {keys.created_dev_key} "
            "(role admin)"
        )
    return f"memory-service listening on {url} (docs: {url}/docs) | {storage} | API keys: {origin}"
