"""Key races on a Qdrant collection, resolved when reading, as the files backend resolves them.

A process serialises its own writes of a user, but two processes (replicas) on one Qdrant
server that record one ``key`` at the same moment each read "no open fact with this key" (or
the same older one) and each store their fact open. Nothing can stop that without a lock the
server shares, so reads resolve it with the rule every backend uses
(``store_values.newest_holders`` / ``resolve_key_race``): the newest stored-open fact holds
the key and the others read as superseded by it. The next record of that key writes their
closure down (``StoredFacts.raced``), and so does maintenance (``settle``).

What a read costs: one exact ``count`` over the ``key`` payload index when what it found
carries open keys, and a scroll of the keys' open points only when that count says a key has
a rival (and, for a search, the query again without the facts that lost).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.qdrant.engine import QdrantEngine
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.payload import fact_of
from memory_service.longterm.qdrant.points import StoredPoint
from memory_service.longterm.store_values import newest_holders, resolve_key_race, stored_open


def _open_key(payload: Mapping[str, Any]) -> str | None:
    """The key a stored point holds open (None: no key, or closed)."""
    if payload.get("superseded_by") is not None or payload.get("valid_to") is not None:
        return None
    key = payload.get("key")
    return str(key) if key is not None else None


class KeyRaces:
    """The read-time resolution of one engine's key races, scoped to one owner per call."""

    def __init__(self, engine: QdrantEngine) -> None:
        self.engine = engine

    def holders(self, ctx: RuntimeContext, keys: Iterable[str]) -> dict[str, Fact]:
        """The fact holding each of ``keys`` (the newest stored-open one), expired or not."""
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        points = self.engine.scroll(OwnerFilter.of(ctx, keys=wanted, open_only=True))
        return newest_holders(fact_of(p.id, p.payload) for p in points)

    def held(self, ctx: RuntimeContext, keys: Iterable[str], now: datetime) -> set[str]:
        """Which of ``keys`` a live fact holds: the key's holder, not expired at ``now`` (a
        lost race holds nothing, even when the holder expired). One scroll; facts are built
        only for keys with several open points."""
        wanted = sorted(set(keys))
        if not wanted:
            return set()
        by_key: dict[str, list[StoredPoint]] = {}
        for point in self.engine.scroll(OwnerFilter.of(ctx, keys=wanted, open_only=True)):
            by_key.setdefault(str(point.payload["key"]), []).append(point)
        out = set()
        for key, points in by_key.items():
            if len(points) == 1:
                expires = parse_time(points[0].payload.get("expires_at"))
                live = expires is None or expires > now
            else:
                live = newest_holders(fact_of(p.id, p.payload) for p in points)[key].is_active(now)
            if live:
                out.add(key)
        return out

    def rivals(self, ctx: RuntimeContext, payloads: Mapping[str, Mapping[str, Any]]) -> bool:
        """Whether some stored-open point among ``payloads`` (by id) may share its key with
        another open point of the owner (no payload parsed: a query's hits ask this)."""
        keyed = {fid: key for fid, p in payloads.items() if (key := _open_key(p)) is not None}
        return self._contested(ctx, keyed)

    def _contested(self, ctx: RuntimeContext, keyed: Mapping[str, str]) -> bool:
        """``keyed``: stored-open facts' keys by id. Contested when two of them share a key
        or the owner has more open points with their keys than they are: one exact count
        over the key index, so the common answer, no, costs that alone."""
        if not keyed:
            return False
        keys = set(keyed.values())
        if len(keys) < len(keyed):
            return True
        scope = OwnerFilter.of(ctx, keys=sorted(keys), open_only=True)
        return self.engine.count(scope) > len(keys)

    def resolve(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> list[Fact]:
        """``facts`` as reading resolves them: a stored-open fact whose key a newer open fact
        of the owner holds reads as superseded by it (a count, and a scroll of the keys'
        open points only when that count finds a rival)."""
        keyed = {f.id: f.key for f in facts if f.key is not None and stored_open(f)}
        if not self._contested(ctx, keyed):
            return list(facts)
        holders = self.holders(ctx, keyed.values())
        return [resolve_key_race(f, holders) for f in facts]

    def losers(self, ctx: RuntimeContext, facts: Iterable[Fact]) -> dict[str, Fact]:
        """Among ``facts``, those that lost a key race, closed as reading shows them, by id."""
        given = list(facts)
        resolved = self.resolve(ctx, given)
        return {new.id: new for old, new in zip(given, resolved, strict=True) if new is not old}

    def settle(self, ctx: RuntimeContext) -> int:
        """Write down every lost race of the owner (``superseded_by``, ``valid_to``), so the
        stored points say what reading does; how many were closed. The caller holds the
        owner's write lock."""
        open_points = self.engine.scroll(OwnerFilter.of(ctx, open_only=True))
        keyed = [fact_of(p.id, p.payload) for p in open_points if p.payload.get("key")]
        holders = newest_holders(keyed)
        closed = {
            f.id: {"superseded_by": shut.superseded_by, "valid_to": _iso(shut.valid_to)}
            for f in keyed
            if (shut := resolve_key_race(f, holders)) is not f
        }
        if closed:
            self.engine.set_payload(OwnerFilter.of(ctx, ids=sorted(closed)), closed)
        return len(closed)


def _iso(moment: datetime | str | None) -> str | None:
    """A time as the payload stores it (UTC ISO-8601)."""
    value = parse_time(moment)
    return value.isoformat() if value is not None else None
