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

    from memory_service.api.app import create_app
    from memory_service.api.keys import load_key_ring
    from memory_service.commands.common import settings_from
    from memory_service.mcp_server.http import mount_mcp
    from memory_service.observe.logs import configure_logging
    from memory_service.observe.telemetry import NULL_SINK, using_sink
    from memory_service.services.container import build_services
    from memory_service.services.work import build_scheduler

    settings = settings_from(args)
    observability = settings.observability
    configure_logging(observability.log_format, observability.log_level)
    host = args.host or settings.api.host
    port = args.port or settings.api.port
    settings.workspace.mkdir(parents=True, exist_ok=True)
    # a bad keys file is told before the model loads; keys in PostgreSQL need its pool
    keys = None if settings.state_in_postgres else load_key_ring(settings)
    services = build_services(settings)
    try:
        keys = keys or load_key_ring(settings, services.database)
    except BaseException:
        services.close()
        raise
    app = create_app(services, keys.ring)
    mount_mcp(app, services, keys.ring, host=host)
    print(banner(f"http://{host}:{port}", services.describe_storage(), keys), flush=True)
    scheduler = build_scheduler(services, app.state.maintenance, keys.ring.tenants)
    with using_sink(app.state.metrics or NULL_SINK):  # the scheduler's thread counts there
        scheduler.start()
    # The service logs each request itself (route template, status, time, trace): uvicorn's
    # access line would add the raw path and query. The banner says where it listens:
    # uvicorn's own start and stop lines would repeat it; its warnings and errors still show.
    config = uvicorn.Config(
        app, host=host, port=port, log_level="info", access_log=False, log_config=None
    )
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    try:
        uvicorn.Server(config).run()
    finally:
        scheduler.stop()
        services.close()
    return 0


def banner(url: str, storage: str, keys: KeySource) -> str:
    """The one line ``serve`` prints at start (the README shows it)."""
    count = len(keys.ring)
    origin = f"{keys.where} ({count} key{'s' if count != 1 else ''})"
    if keys.created_dev_key:
        origin = (
            f"{keys.where}, new development key for tenant 'default': {keys.created_dev_key} "
            "(role admin)"
        )
    return f"memory-service listening on {url} (docs: {url}/docs) | {storage} | API keys: {origin}"
