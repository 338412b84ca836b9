"""``memory-service serve``: the HTTP API on the configured backends, in this process or in
``--workers N`` processes on one port (``commands/workers.py``)."""

from __future__ import annotations

import argparse

from memory_service.commands.serving import banner, bind_listener, serve_app, url_host
from memory_service.commands.workers import check_shareable, parse_workers, supervise


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="run the HTTP API")
    parser.add_argument("--host", help="bind address (default: MEMORY_API__HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: MEMORY_API__PORT or 8080)")
    parser.add_argument("--workspace", help="workspace (default: MEMORY_WORKSPACE or ./data)")
    parser.add_argument(
        "--workers",
        default="1",
        metavar="N",
        help="serving processes on the one port (default 1); several need stores that "
        "processes share (README: One database: PostgreSQL)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from memory_service.commands.common import settings_from
    from memory_service.observe.logs import configure_logging

    workers = parse_workers(args.workers)
    settings = settings_from(args)
    observability = settings.observability
    configure_logging(observability.log_format, observability.log_level)
    host = args.host or settings.api.host
    port = args.port if args.port is not None else settings.api.port
    if workers > 1:
        check_shareable(settings, workers)
    listener = bind_listener(host, port)
    try:
        if workers > 1:
            return supervise(settings, host, listener, workers)
        url = f"http://{url_host(host)}:{listener.getsockname()[1]}"
        serve_app(
            settings,
            host,
            listener,
            lambda storage, keys: print(banner(url, storage, keys), flush=True),
        )
    finally:
        listener.close()
    return 0
