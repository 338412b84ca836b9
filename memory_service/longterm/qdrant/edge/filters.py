"""A ``OwnerFilter`` as a Qdrant Edge filter: the owner first, always, then ids, keys, the
open/live/valid-at conditions of a read, the ``FactFilter``'s metadata and the ids a read
resolved away, all inside the query so every leg's top-k is taken over the facts the read
admits."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import qdrant_edge as qe

from memory_service.domain.fact_filter import FactFilter
from memory_service.longterm.qdrant.filters import ImportanceTtl, OwnerFilter


def edge_filter(scope: OwnerFilter) -> qe.Filter:
    """The one translation of a ``OwnerFilter``: tenant and user first, always."""
    must: list[Any] = [
        qe.FieldCondition(name, match=qe.MatchValue(value))
        for name, value in scope.owner_conditions()
    ]
    if scope.ids is not None:
        must.append(qe.HasIdCondition(set(scope.ids)))
    if scope.keys is not None:
        must.append(qe.FieldCondition("key", match=qe.MatchAny(list(scope.keys))))
    if scope.open_only:
        must += [qe.IsEmptyCondition("superseded_by"), qe.IsEmptyCondition("valid_to")]
    if scope.live_at is not None:
        must.append(_live_at(scope.live_at, scope.ttl))
    if scope.valid_at is not None:
        must += _valid_at(scope.valid_at)
    if scope.facts is not None:
        must += fact_conditions(scope.facts)
    if scope.exclude_ids is not None:
        return qe.Filter(must=must, must_not=[qe.HasIdCondition(set(scope.exclude_ids))])
    return qe.Filter(must=must)


# The time conditions are most of a filter's cost (Edge parses each date range: ~15 us
# apiece, ~45 us with the importance TTL), and every scope of one recall asks them at the
# same moment: built once per moment, they are shared (Edge copies a condition it is given).
@lru_cache(maxsize=32)
def _live_at(live_at: str, ttl: ImportanceTtl | None) -> qe.Filter:
    """Not expired at ``live_at``."""
    later = qe.FieldCondition("expires_at", range=qe.RangeDateTime(gt=live_at))
    return qe.Filter(should=[_no_expiry(ttl), later])


@lru_cache(maxsize=32)
def _valid_at(valid_at: str) -> tuple[Any, ...]:
    """Created by ``valid_at``, and open or closed later."""
    created = qe.FieldCondition("created_at", range=qe.RangeDateTime(lte=valid_at))
    still_open = qe.Filter(
        must=[qe.IsEmptyCondition("superseded_by"), qe.IsEmptyCondition("valid_to")]
    )
    closed_later = qe.FieldCondition("valid_to", range=qe.RangeDateTime(gt=valid_at))
    return created, qe.Filter(should=[still_open, closed_later])


def _importance(gte: int | None = None, lt: int | None = None) -> qe.FieldCondition:
    low = float(gte) if gte is not None else None
    high = float(lt) if lt is not None else None
    return qe.FieldCondition("importance", range=qe.RangeFloat(gte=low, lt=high))


def _created(gte: str | None = None, gt: str | None = None, lt: str | None = None) -> Any:
    return qe.FieldCondition("created_at", range=qe.RangeDateTime(gte=gte, gt=gt, lt=lt))


def _no_expiry(ttl: ImportanceTtl | None) -> qe.Filter:
    """No ``expires_at`` of its own and, with ``ttl``, young enough for its importance."""
    empty = qe.IsEmptyCondition("expires_at")
    if ttl is None:
        return qe.Filter(must=[empty])
    young = [
        _importance(gte=ttl.never_at),
        qe.Filter(must=[_importance(gte=ttl.long_at), _created(gt=ttl.long_after)]),
        qe.Filter(must=[_importance(lt=ttl.long_at), _created(gt=ttl.short_after)]),
    ]
    return qe.Filter(must=[empty, qe.Filter(should=young)])


def fact_conditions(facts: FactFilter) -> list[Any]:
    """A ``FactFilter``'s metadata conditions (``as_of`` is ``valid_at``, above)."""
    must: list[Any] = []
    if facts.kinds:
        must.append(qe.FieldCondition("kind", match=qe.MatchAny(list(facts.kinds))))
    if facts.tags_any:
        must.append(qe.FieldCondition("tags", match=qe.MatchAny(list(facts.tags_any))))
    must += [qe.FieldCondition("tags", match=qe.MatchValue(tag)) for tag in facts.tags_all]
    if facts.min_importance is not None:
        must.append(_importance(gte=facts.min_importance))
    if facts.key is not None:
        must.append(qe.FieldCondition("key", match=qe.MatchValue(facts.key)))
    if facts.created_after is not None or facts.created_before is not None:
        after = facts.created_after.isoformat() if facts.created_after else None
        before = facts.created_before.isoformat() if facts.created_before else None
        must.append(_created(gte=after, lt=before))
    return must
