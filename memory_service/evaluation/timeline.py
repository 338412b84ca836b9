"""The time benchmark: latest-value and as-of accuracy, per preset, over fresh backends.

Every user of ``synthetic_time`` is recorded into a fresh backend per preset (the code path
``serve`` uses, ``FreshBackends``); each question is asked once with ``top_k`` 1 and is right
when the top hit is its one gold fact. As-of questions carry ``as_of`` and the attribute's
key as the filter, so they are exact by construction; latest-value questions are asked now,
unfiltered, where only supersession (keyed) or ranking (unkeyed: every value is still open)
can pick the newest value: the recency preference's case.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import TextIO

from indexing.embeddings import Embedder
from memory_service.config.settings import Settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import FactFilter
from memory_service.evaluation.backends import FreshBackends, with_backend
from memory_service.evaluation.datasets.synthetic_time import CATEGORIES, TimeDataset

TENANT = "bench"


def run_time(
    settings: Settings,
    embedder: Embedder,
    dataset: TimeDataset,
    presets: tuple[str, ...],
    *,
    workdir=None,
) -> dict:
    """Accuracy and stale share by category, for each preset (speed: the scale run)."""
    runs = []
    for preset in presets:
        backends = FreshBackends(with_backend(settings, None, preset), embedder, workdir)
        right: Counter[str] = Counter()
        stale: Counter[str] = Counter()
        asked: Counter[str] = Counter()
        for user in dataset.users:
            ctx = RuntimeContext(TENANT, user.user_id)
            with backends.fresh() as memory:
                results = memory.record(ctx, [item.fact for item in user.items])
                id_of = {item.ref: r.id for item, r in zip(user.items, results, strict=True)}
                for q in user.questions:
                    fact_filter = FactFilter(as_of=q.as_of, key=q.key) if q.as_of else None
                    hits = memory.retrieve(ctx, q.text, 1, filter=fact_filter)
                    top = hits[0].fact.id if hits else None
                    asked[q.category] += 1
                    right[q.category] += top == id_of[q.gold]
                    stale[q.category] += top in {id_of[r] for r in q.stale}
        runs.append(
            {
                "preset": preset,
                "accuracy": {c: right[c] / asked[c] if asked[c] else None for c in CATEGORIES},
                "stale": {c: stale[c] / asked[c] if asked[c] else None for c in CATEGORIES},
                "questions": {c: asked[c] for c in CATEGORIES},
            }
        )
    return {
        "dataset": "synthetic-time",
        "users": len(dataset.users),
        "facts": sum(len(u.items) for u in dataset.users),
        "questions": dataset.question_count,
        "anchor": dataset.anchor.isoformat(),
        "runs": runs,
    }


def print_time_report(doc: dict, out: TextIO = sys.stdout) -> None:
    """One line per preset: accuracy by category (questions in brackets); then
    how often the top hit was another value of the same attribute (a stale or future one)."""
    print(
        f"time benchmark ({doc['dataset']}): {doc['users']} users, {doc['facts']} facts, "
        f"{doc['questions']} questions, top-1 accuracy",
        file=out,
    )
    header = f"{'preset':<18}" + "".join(f"{c:>20}" for c in CATEGORIES)
    print(header, file=out)
    for run in doc["runs"]:
        cells = []
        for category in CATEGORIES:
            share, count = run["accuracy"][category], run["questions"][category]
            cells.append(f"{'-' if share is None else f'{share:.1%}'} ({count})".rjust(20))
        print(f"{run['preset']:<18}" + "".join(cells), file=out)
    print("top-1 was another value of the same attribute (stale, or not yet valid):", file=out)
    for run in doc["runs"]:
        shares = [run["stale"][c] for c in CATEGORIES]
        cells = [("-" if v is None else f"{v:.1%}").rjust(20) for v in shares]
        print(f"{run['preset']:<18}" + "".join(cells), file=out)
