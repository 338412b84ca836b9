"""``memory-service`` command line. Each subcommand lives in ``memory_service.commands``.

Errors print one line (``memory-service: error: ...``) to stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from memory_service.commands import (
    bench,
    erase,
    keys,
    maintain,
    mcp,
    memories,
    reembed,
    serve,
    sessions,
    transfer,
)
from memory_service.domain.errors import MemoryServiceError
from memory_service.observe.logs import configure_logging

COMMANDS: tuple[ModuleType, ...] = (
    serve,
    memories,
    bench,
    transfer,
    maintain,
    keys,
    erase,
    sessions,
    mcp,
    reembed,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-service",
        description="Long-term memory for LLM agents: serve the API or work on a workspace.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
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
