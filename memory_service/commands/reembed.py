"""``memory-service reembed``: move the long-term store to the configured embedding model.

A store keeps the model its vectors came from, and opening it with another one stops with one
line naming ``MEMORY_EMBEDDING__MODEL`` (``longterm.store_embedder``). This command embeds
every fact again with the configured model, with progress (a bar on a terminal, a log line
every few seconds elsewhere); stopped (Ctrl-C, a kill, ``--limit``), it goes on from where
it stopped when run again, and the store opens for nothing else until it is complete. Stop
the service first: an Edge folder has one owner, and a running service would go on writing
vectors of the old model.
"""

from __future__ import annotations

import argparse

from memory_service.commands.common import print_json, settings_from


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "reembed",
        help="embed the stored facts again with the configured embedding model",
    )
    parser.add_argument("--workspace", help="workspace folder")
    parser.add_argument(
        "--limit",
        type=_positive,
        help="stop after about this many facts (run again to go on)",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(handler=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from memory_service.longterm.store_embedder import REEMBED_COMMAND, reembed
    from memory_service.observe.progress import Progress
    from memory_service.services.stores import build_embedder, open_embedder_records

    settings = settings_from(args)
    embedder = build_embedder(settings)
    bar: list[Progress] = []
    with open_embedder_records(settings, embedder) as records:
        try:
            outcome = reembed(
                records,
                embedder,
                limit=args.limit,
                on_start=lambda total: bar.append(Progress(total, "re-embedding facts")),
                on_batch=lambda count: bar[0].update(count),
            )
        finally:
            for progress in bar:
                progress.close()
        where = records.description
    if args.json:
        print_json(
            {
                "model": outcome.embedder.model,
                "dimension": outcome.embedder.dimension,
                "reembedded": outcome.done,
                "left": outcome.left,
            }
        )
    elif outcome.left:
        print(
            f"re-embedded {outcome.done} facts of {where} with {outcome.embedder}; "
            f"{outcome.left} left: run `{REEMBED_COMMAND}` again to go on"
        )
    elif outcome.done:
        print(f"re-embedded {outcome.done} facts of {where} with {outcome.embedder}")
    else:
        print(f"nothing to re-embed: {where} holds vectors of {outcome.embedder}")
    return 0
