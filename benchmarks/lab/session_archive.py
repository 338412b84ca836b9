"""What the end-of-session archive gives recall: LoCoMo's conversations replayed as sessions.

Each LoCoMo session is appended to a service session of its own, every turn a user message
named after its speaker and dated when it was said, then ended with no model configured: the
archive records its messages as events (``pipeline/session_archive.py``), through the same
append (redaction included) and ``end`` a client reaches over HTTP. The questions are asked of
that user's long-term memory (hybrid, the default preset) and each recalled event is scored by
the turn its provenance names (session, message number). Beside it, in the same process and
backend, the same turns recorded the way ``memory-service bench --unit turns`` records them.

    python -m benchmarks.lab.session_archive --data ../shared/data/locomo-dev.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path

from indexing.embeddings import Embedder
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.domain.messages import Msg
from memory_service.evaluation.datasets.locomo import (
    iter_sessions,
    load_locomo,
    parse_evidence,
    session_time,
    turn_text,
)
from memory_service.evaluation.metrics import mean, recall_at_k, reciprocal_rank
from memory_service.services import build_services

KS = (5, 10, 25)


def _refs_of_archived(fact: Fact, by_seq: dict[tuple[str, int], str]) -> set[str]:
    """The dia_ids of the turns an archived event (and each wording merged into it) came
    from, by its source's session and message number."""
    sources = [fact.source, *(p.source for p in fact.phrasings)]
    return {
        by_seq[(s.session_id, n)]
        for s in sources
        if s is not None and s.session_id is not None
        for n in s.messages
        if (s.session_id, n) in by_seq
    }


def _replay(services, ctx: RuntimeContext, sample: dict) -> tuple[dict[tuple[str, int], str], int]:
    """The sample's sessions appended and ended; (session, seq) -> dia_id, and how many
    messages were appended."""
    conversation = sample.get("conversation") or {}
    by_seq: dict[tuple[str, int], str] = {}
    count = 0
    for number, turns in iter_sessions(conversation):
        start = session_time(conversation, number)
        session_id = f"session_{number}"
        messages, ids = [], []
        for position, turn in enumerate(turns):
            dia = parse_evidence(turn.get("dia_id"))
            said = turn_text(turn, "plain")
            if not said or not dia:
                continue  # as the bench's turns unit: no text or no id, not a memory
            when = start + timedelta(seconds=position) if start is not None else None
            name = str(turn.get("speaker") or "?")
            messages.append(Msg.user(said, name=name, created_at=when))
            ids.append(dia[0])
        if not messages:
            continue
        session = RuntimeContext(ctx.tenant_id, ctx.user_id, session_id)
        appended = services.shortterm.append(session, messages, compact=False)
        for stored, dia_id in zip(appended.appended, ids, strict=True):
            by_seq[(session_id, stored.seq)] = dia_id
        services.shortterm.end(session)
        count += len(messages)
    return by_seq, count


def _scores(rankings: Iterable[tuple[Sequence[set[str]], frozenset[str]]]) -> dict[str, float]:
    rows = list(rankings)
    out = {f"R@{k}": 100 * mean([recall_at_k(r, g, k) for r, g in rows]) for k in KS}
    out["MRR"] = 100 * mean([reciprocal_rank(r, g) for r, g in rows])
    out["questions"] = len(rows)
    return out


def run(data_path: Path, limit: int | None, embedder: Embedder | None = None) -> dict:
    data = json.loads(data_path.read_text(encoding="utf-8"))[:limit]
    dataset = load_locomo(data, unit="turns")
    with tempfile.TemporaryDirectory() as folder:
        settings = load_settings(workspace=Path(folder), memory={"session_archive": "always"})
        services = build_services(settings, embedder=embedder)
        if services.memory_model is not None:
            raise SystemExit("unset MEMORY_LLM__*: the archive is measured without a model")
        try:
            archived, recorded = [], []
            archive_s = 0.0
            appended = 0
            for index, (sample, conv) in enumerate(zip(data, dataset.conversations, strict=True)):
                archive_ctx = RuntimeContext("bench", f"archive-{index}")
                bench_ctx = RuntimeContext("bench", f"turns-{index}")
                started = time.perf_counter()
                by_seq, count = _replay(services, archive_ctx, sample)
                archive_s += time.perf_counter() - started
                appended += count
                facts = [item.to_fact() for item in conv.items]
                results = services.longterm.record(bench_ctx, facts)
                refs_by_id: dict[str, set[str]] = {}
                for item, result in zip(conv.items, results, strict=True):
                    refs_by_id.setdefault(result.id, set()).update(item.refs)
                for question in conv.questions:
                    hits = services.longterm.retrieve(archive_ctx, question.text, max(KS))
                    ranked = [_refs_of_archived(h.fact, by_seq) for h in hits]
                    archived.append((ranked, question.gold))
                    hits = services.longterm.retrieve(bench_ctx, question.text, max(KS))
                    ranked = [refs_by_id.get(h.fact.id, set()) for h in hits]
                    recorded.append((ranked, question.gold))
        finally:
            services.close()
    return {
        "messages_appended": appended,
        "archive": _scores(archived),
        "bench_turns": _scores(recorded),
        "archive_s": round(archive_s, 1),  # embedding included (the second record reuses it)
    }


def main(argv: Sequence[str] | None = None, *, embedder: Embedder | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=os.environ.get("LOCOMO_DATA"))
    parser.add_argument("--limit", type=int, default=None, help="first N conversations")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if args.data is None:
        raise SystemExit("--data PATH (or $LOCOMO_DATA): LoCoMo's JSON")
    figures = run(args.data, args.limit, embedder)
    print(f"{'recorded as':<28} {'R@5':>6} {'R@10':>6} {'R@25':>6} {'MRR':>6}  questions")
    for label, key in (
        ("session archive (no model)", "archive"),
        ("bench --unit turns", "bench_turns"),
    ):
        row = figures[key]
        cells = " ".join(f"{row[c]:6.1f}" for c in ("R@5", "R@10", "R@25", "MRR"))
        print(f"{label:<28} {cells}  {row['questions']}")
    appended, seconds = figures["messages_appended"], figures["archive_s"]
    print(f"{appended} messages appended and ended into the archive in {seconds} s")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
