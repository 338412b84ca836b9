"""``memory-service serve``: the HTTP API on the configured backends.

The port is bound first, before the stores open and the model loads: a port that is taken is
one error line (exit 2) within a moment, and no development key is minted that no banner would
show. The banner ("memory-service listening on ...") is printed once the socket accepts
connections, so whoever reads it can connect at once.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from memory_service.domain.errors import MemoryServiceError
from memory_service.stores.fsutil import ensure_dir

if TYPE_CHECKING:
    import uvicorn

    from memory_service.api.keys import KeySource
    from memory_service.config.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="run the HTTP API")
    parser.add_argument("--host", help="bind address (default: MEMORY_API__HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: MEMORY_API__PORT or 8080)")
    parser.add_argument("--workspace", help="workspace (default: MEMORY_WORKSPACE or ./data)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from memory_service.commands.common import settings_from
    from memory_service.observe.logs import configure_logging

    settings = settings_from(args)
    observability = settings.observability
    configure_logging(observability.log_format, observability.log_level)
    host = args.host or settings.api.host
    port = args.port if args.port is not None else settings.api.port
    listener = bind_listener(host, port)
    try:
        _serve(settings, host, listener)
    finally:
        listener.close()
    return 0


def _serve(settings: Settings, host: str, listener: socket.socket) -> None:
    import uvicorn

    from memory_service.api.app import create_app
    from memory_service.api.keys import load_key_ring
    from memory_service.mcp_server.http import mount_mcp
    from memory_service.observe.telemetry import NULL_SINK, using_sink
    from memory_service.services.container import build_services
    from memory_service.services.work import build_scheduler

    port = listener.getsockname()[1]  # with --port 0, the one the system chose
    ensure_dir(settings.workspace)
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
    line = banner(f"http://{url_host(host)}:{port}", services.describe_storage(), keys)
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
        server = announcing_server(config, lambda: print(line, flush=True))
        server.run(sockets=[listener])
    finally:
        scheduler.stop()
        services.close()


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` with the options asyncio gives a server it binds
    itself (uvicorn listens on it); a port that is taken, or not this user's to bind, is one
    ``MemoryServiceError``.

    The protocol is named, not left 0: asyncio turns Nagle's algorithm off (``TCP_NODELAY``)
    only on accepted sockets whose ``proto`` is TCP, and accepted sockets inherit it from this
    one. Without it every small response on a kept-alive connection waits for the client's
    delayed acknowledgement.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.set_inheritable(True)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = (exc.strerror or str(exc)).lower()
        raise MemoryServiceError(
            f"cannot listen on {url_host(host)}:{port}: {why} (another process, perhaps "
            "another serve, holds it: stop it or choose a port with --port or "
            "MEMORY_API__PORT)",
            code="cannot_listen",
        ) from None
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def announcing_server(config: uvicorn.Config, on_started: Callable[[], None]) -> uvicorn.Server:
    """A ``uvicorn.Server`` that calls ``on_started`` once its sockets accept connections
    (not when lifespan start-up failed)."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and not self.should_exit:
                on_started()

    return AnnouncingServer(config)


def banner(url: str, storage: str, keys: KeySource) -> str:
    """The one line ``serve`` prints at start (the README shows it)."""
    count = len(keys.ring)
    origin = f"{keys.where} ({count} key{'s' if count != 1 else ''})"
    if keys.created_dev_key:
        origin = (
            f"{keys.where}, new development key for tenant 'default': {keys.created_dev_key} "
            "(role admin)"
        )
    pages = f"docs: {url}/docs, inspector: {url}/ui"
    return f"memory-service listening on {url} ({pages}) | {storage} | API keys: {origin}"
