"""A recall over several scopes on the files backend builds a wider scope's hits only above
the first scope's ``depth``-th score on each leg (``store_values.merge_floors``): whatever is
at or below it cannot reach the merged cut. The recall must be exactly what building every
scope's hits in full gives, with keys that hide wider facts, filters and a read about the past."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from indexing.embeddings import Embedder
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, utcnow
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.store_hooks import LongTermHooks

ALICE = RuntimeContext("acme", "alice", agent_id="support")
NOW = utcnow()


class _EveryHit(FileSystemLongTermMemory):
    """The files backend with the base's per-scope default: every scope's hits in full."""

    _candidates_each = LongTermHooks._candidates_each


def _fill(memory: FileSystemLongTermMemory) -> list[str]:
    """80 user facts (more than a recall's depth, so floors exist), 40 in the agent's and
    40 in the tenant's memory, keys shared between scopes; the questions of each bank."""
    asked = []
    for index, scope, count in ((1, "user", 80), (2, "agent", 40), (3, "tenant", 40)):
        bank, questions = scale_texts(index, count, seed=5)
        asked += questions[:4]
        facts = [
            Fact(
                text,
                importance=3 + i % 6,
                key=f"k{i}" if i % 4 == 0 else None,
                created_at=NOW - timedelta(days=1 + i % 7, minutes=i),
                scope=scope,
            )
            for i, text in enumerate(bank)
        ]
        memory.record(ALICE, facts)
    return asked


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
@pytest.mark.parametrize(
    "fact_filter", [None, FactFilter(min_importance=5), FactFilter(as_of=NOW - timedelta(days=3))]
)
def test_floors_change_nothing_a_recall_returns(
    tmp_path: Path, embedder: Embedder, mode, fact_filter
):
    memory = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    questions = _fill(memory)
    full = _EveryHit(tmp_path / "ws", embedder)
    wide = 0
    for question in questions:
        got = memory.retrieve(ALICE, question, 10, mode=mode, filter=fact_filter)
        want = full.retrieve(ALICE, question, 10, mode=mode, filter=fact_filter)
        assert [(r.fact.id, round(r.score, 9), r.ranks) for r in got] == [
            (r.fact.id, round(r.score, 9), r.ranks) for r in want
        ]
        wide += sum(r.fact.scope != "user" for r in got)
    assert wide > 0  # the shared scopes do reach the answers: the comparison is not trivial
