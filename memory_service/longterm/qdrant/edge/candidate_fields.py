"""What a recall reads of each Edge candidate, held in this process: its ``CANDIDATE_FIELDS``
and its BM25 document's term ids, by point id.

Why: converting those fields and the sparse vector of ~100 candidates in Edge's Python binding
was most of an Edge recall's engine time. Asking the engine for ids and scores alone and
reading the fields from here takes the engine call, hits built included, from 3.1 ms to
1.1 ms a recall on LoCoMo's facts (``benchmarks/RESULTS.md``, "Recall time by stage").

It is exact because one process owns an Edge folder: every write goes through its engine,
which forgets the points it writes before and after it writes them, and a fill that a write
overtook (``epoch``) is dropped. A miss is read from the shard by id. At most ``limit`` points
are held, the least recently read dropped first.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from memory_service.facts import parse_time

CANDIDATE_FIELD_POINTS = 20_000

# A point's fields, its term ids as 4-byte integers and its time parsed: ~0.9 KB a point of
# 15 terms (the term ids as a set of Python ints, 1.9 KB). Edge's peak RSS at 100k facts over
# 1,000 users (``memory-service bench --scale 100000``, 2026-12-04): 707 MB holding nothing,
# 727 MB with arrays, 768 MB with sets.
Entry = tuple[dict[str, Any], array, datetime | None]


def entry(fields: dict[str, Any], term_ids: Iterable[int]) -> Entry:
    """What is held of a point: ``fields``, its term ids (31-bit, as ``array("I")``) and its
    ``created_at`` parsed (each recall reads it of every candidate)."""
    return fields, array("I", term_ids), parse_time(fields.get("created_at"))


class CandidateFields:
    """Point id -> its ``Entry``."""

    def __init__(self, limit: int = CANDIDATE_FIELD_POINTS) -> None:
        self.limit = limit
        self._held: OrderedDict[str, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._held)

    @property
    def epoch(self) -> int:
        """Changes with every write: a fill read before it is not kept."""
        return self._epoch

    def held(self, ids: Iterable[str]) -> tuple[dict[str, Entry], list[str]]:
        """The entries of ``ids`` this process holds, and the ids it does not."""
        found: dict[str, Entry] = {}
        missing: list[str] = []
        with self._lock:
            for point_id in ids:
                entry = self._held.get(point_id)
                if entry is None:
                    missing.append(point_id)
                else:
                    self._held.move_to_end(point_id)
                    found[point_id] = entry
        return found, missing

    def fill(self, entries: Mapping[str, Entry], epoch: int) -> None:
        """Hold ``entries``, read from the shard at ``epoch``, unless a write came since."""
        with self._lock:
            if epoch != self._epoch:
                return
            self._held.update(entries)
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
