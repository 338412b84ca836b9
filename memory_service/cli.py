"""``memory-service`` command line. Each subcommand lives in ``memory_service.commands``.

Errors print one line (``memory-service: error: ...``) to stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from memory_service.errors import MemoryServiceError
from memory_service.observe.logs import configure_logging

COMMAND_MODULES: tuple[str, ...] = (
    "memory_service.commands.serve",
    "memory_service.commands.memories",
    "memory_service.commands.bench",
    "memory_service.commands.transfer",
    "memory_service.commands.maintain",
    "memory_service.commands.keys",
    "memory_service.commands.erase",
    "memory_service.commands.sessions",
    "memory_service.commands.mcp",
    "memory_service.commands.reembed",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-service",
        description="Long-term memory for LLM agents: serve the API or work on a workspace.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _one_line(message: str) -> str:
    """The promised single line, even for a message quoting a multi-line cause."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging("text", logging.INFO)  # serve applies MEMORY_OBSERVABILITY__LOG_*
    for noisy in ("sentence_transformers", "httpx", "httpx2", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.handler(args) or 0)
    except MemoryServiceError as exc:
        print(f"memory-service: error: {_one_line(exc.message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
