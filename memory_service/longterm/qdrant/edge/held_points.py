"""What a recall reads of each Edge point, held in this process by point id: its
``CANDIDATE_FIELDS`` with its BM25 document's term ids (``CANDIDATE_FIELD_POINTS`` points),
and the whole fact of a point a recall returned (``FACT_POINTS``).

Why: converting those fields and the sparse vector of ~100 candidates in Edge's Python binding
was most of an Edge recall's engine time. Asking the engine for ids and scores alone and
reading the fields from here takes the engine call, hits built included, from 3.1 ms to
1.1 ms a recall on LoCoMo's facts; reading the ten facts a recall returns (a payload of up to
2 KB each, made a ``Fact``) cost another ~0.3 ms (``benchmarks/RESULTS.md``, "Recall time by
stage").

It is exact because one process owns an Edge folder: every write goes through its engine,
which forgets the points it writes before and after it writes them, and a fill that a write
overtook (``epoch``) is dropped. A miss is read from the shard by id. The least recently read
points are dropped first past the limit.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from memory_service.facts import Fact, parse_time
from memory_service.longterm.qdrant.filters import OwnerKey

CANDIDATE_FIELD_POINTS = 20_000
FACT_POINTS = 2_000  # ~2.5 KB each with a source text of 2 KB

# A point's fields, its term ids as 4-byte integers and its time parsed: ~0.9 KB a point of
# 15 terms (the term ids as a set of Python ints, 1.9 KB). Edge's peak RSS at 100k facts over
# 1,000 users (``memory-service bench --scale 100000``, 2026-12-04): 707 MB holding nothing,
# 727 MB with arrays, 768 MB with sets.
Entry = tuple[dict[str, Any], array, datetime | None]

# A fact read whole, with the owner whose point it is (a read by id checks it).
OwnedFact = tuple[OwnerKey, Fact]

V = TypeVar("V")


def entry(fields: dict[str, Any], term_ids: Iterable[int]) -> Entry:
    """What is held of a candidate: ``fields``, its term ids (31-bit, as ``array("I")``) and
    its ``created_at`` parsed (each recall reads it of every candidate)."""
    return fields, array("I", term_ids), parse_time(fields.get("created_at"))


class HeldPoints(Generic[V]):
    """Point id -> what is held of it, at most ``limit`` points."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._held)

    @property
    def epoch(self) -> int:
        """Changes with every write: a fill read before it is not kept."""
        return self._epoch

    def held(self, ids: Iterable[str]) -> tuple[dict[str, V], list[str]]:
        """The values of ``ids`` this process holds, and the ids it does not."""
        found: dict[str, V] = {}
        missing: list[str] = []
        with self._lock:
            for point_id in ids:
                value = self._held.get(point_id)
                if value is None:
                    missing.append(point_id)
                else:
                    self._held.move_to_end(point_id)
                    found[point_id] = value
        return found, missing

    def fill(self, values: Mapping[str, V], epoch: int) -> None:
        """Hold ``values``, read from the shard at ``epoch``, unless a write came since."""
        with self._lock:
            if epoch != self._epoch:
                return
            self._held.update(values)
            while len(self._held) > self.limit:
                self._held.popitem(last=False)

    def forget(self, ids: Iterable[str] | None = None) -> None:
        """Before and after a write: its points (None: every point) are read again."""
        with self._lock:
            self._epoch += 1
            if ids is None:
                self._held.clear()
                return
            for point_id in ids:
                self._held.pop(point_id, None)
