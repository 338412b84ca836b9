"""What a recall reads of each Edge point, held in this process by point id: its
``CANDIDATE_FIELDS`` with its BM25 document's term ids (``CANDIDATE_FIELD_POINTS`` points),
and the whole fact of a point a recall returned (``FACT_POINTS``).

Why: converting those fields and the sparse vector of ~100 candidates in Edge's Python binding
was most of an Edge recall's engine time. Asking the engine for ids and scores alone and
reading the fields from here cuts the engine call to about a third, and reading the ten facts
a recall returns from here saves their conversion too (``benchmarks/RESULTS.md``, "Recall time
by stage").

It is exact because one process owns an Edge folder: every write goes through its engine,
which forgets the points it writes before and after it writes them, and a fill that a write overtook
(``epoch``) is dropped. A write of whole points (a record, an update) then holds the candidate
fields it wrote (``hold_written``), so a fact just recorded is recalled without a read; otherwise
each question reaching points not held pays a read per point
(``benchmarks.latency.backends_at_scale``; RESULTS.md, "Costs behind the code's choices"). A miss is
read from the shard by id. The least recently read or written points are dropped first past the
limit (a read counts once half the limit is held).
"""

from __future__ import annotations

import threading
import uuid
from array import array
from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.qdrant.filters import OwnerKey

# Bounded so the held points cost tens of MB when full, a small share of Edge's RSS at 100k
# facts (``memory-service bench --scale 100000``; the figures are in benchmarks/RESULTS.md).
CANDIDATE_FIELD_POINTS = 100_000
FACT_POINTS = 2_000  # a few KB each: a fact with its source text

# A point's fields, its term ids as 4-byte integers (a set of Python ints takes about twice
# a point's memory), its time parsed and its id. Held by the id's 128-bit integer: Edge's
# binding hands back each id as a ``UUID``, whose string costs some twenty times its integer a
# candidate (benchmarks/RESULTS.md).
Entry = tuple[dict[str, Any], array, datetime | None, str]

# A fact read whole, with the owner whose point it is (a read by id checks it).
OwnedFact = tuple[OwnerKey, Fact]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def entry(point_id: str, fields: dict[str, Any], term_ids: Iterable[int]) -> Entry:
    """What is held of a candidate: ``fields``, its term ids (31-bit, as ``array("I")``), its
    ``created_at`` parsed (each recall reads it of every candidate) and its id."""
    return fields, array("I", term_ids), parse_time(fields.get("created_at")), point_id


def point_key(point_id: str) -> int:
    """The key a candidate's fields are held under: its id's integer (``UUID.int``)."""
    return uuid.UUID(point_id).int


class HeldPoints(Generic[K, V]):
    """A point's key (its id, or ``point_key``) -> what is held of it, at most ``limit``
    points."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._held)

    @property
    def epoch(self) -> int:
        """Changes with every write: a fill read before it is not kept."""
        return self._epoch

    def held(self, ids: Collection[K]) -> tuple[dict[K, V], list[K]]:
        """The values of ``ids`` this process holds, and the ids it does not. Reads keep
        the recency order only once half the limit is held: below it nothing is dropped,
        and moving a recall's points to the end was a large share of this call (RESULTS.md,
        "Costs behind the code's choices")."""
        with self._lock:
            get = self._held.get
            found = {k: v for k in ids if (v := get(k)) is not None}
            if 2 * len(self._held) >= self.limit:
                move_to_end = self._held.move_to_end
                for point_id in found:
                    move_to_end(point_id)
        missing = [k for k in ids if k not in found] if len(found) < len(ids) else []
        return found, missing

    def fill(self, values: Mapping[K, V], epoch: int) -> None:
        """Hold ``values``, read from the shard at ``epoch``, unless a write came since."""
        with self._lock:
            if epoch != self._epoch:
                return
            self._hold(values)

    def forget(self, ids: Iterable[K] | None = None) -> int:
        """Before and after a write: its points (None: every point) are read again. The
        epoch it sets: a write that ``hold_written`` at it is the only one since."""
        with self._lock:
            self._epoch += 1
            if ids is None:
                self._held.clear()
            else:
                for point_id in ids:
                    self._held.pop(point_id, None)
            return self._epoch

    def hold_written(self, written: Mapping[K, V], epoch: int) -> None:
        """After a write that ``forget`` began at ``epoch``: hold what it wrote, where no
        other write began or ended since (else forget it, as ``forget``). Either way the
        epoch moves on, so a fill that read the points while they were written is dropped."""
        with self._lock:
            self._epoch += 1
            if epoch + 1 != self._epoch:  # another write in between: its order is unknown
                for point_id in written:
                    self._held.pop(point_id, None)
                return
            self._hold(written)

    def _hold(self, values: Mapping[K, V]) -> None:
        """``values`` held as the most recent, the least recent dropped past the limit (the
        caller holds the lock)."""
        for point_id, value in values.items():
            self._held[point_id] = value
            self._held.move_to_end(point_id)
        while len(self._held) > self.limit:
            self._held.popitem(last=False)
