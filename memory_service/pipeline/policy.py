"""Maintenance rules as pure functions over a user's facts: what to merge, close, expire.

Keeping the decisions apart from storage means both backends apply exactly the same rules,
and each rule is tested on crafted fact lists without touching files or Qdrant.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from indexing.hashing import hamming_distance, simhash
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact
from memory_service.domain.limits import MAX_PHRASINGS, MAX_TAGS
from memory_service.longterm.near_duplicates import phrasings_after
from memory_service.longterm.protocol import Settlement

__all__ = ["MaintenancePlan", "near_duplicate_groups", "plan_maintenance"]


@dataclass(slots=True)
class MaintenancePlan:
    """Changes to apply: ids to delete, facts to rewrite (same id, new metadata), and per id
    the decision and why (``reasons``: decision, why, the fact it was merged into)."""

    delete: set[str] = field(default_factory=set)
    update: dict[str, Fact] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not self.delete and not self.update

    def decide(self, fact_id: str, decision: str, why: str, into: str | None = None) -> None:
        """Note why ``fact_id`` changes; a later decision about it adds to the earlier why."""
        earlier = self.reasons.get(fact_id)
        if earlier is not None and decision != "expired":
            why = f"{earlier[1]}; {why}"
        self.reasons[fact_id] = (decision, why, into)

    def settlements(self) -> list[Settlement]:
        """The plan as decisions about stored facts, for a backend that journals them."""
        out = []
        for fid, fact in self.update.items():
            decision, why, _ = self.reasons.get(fid, ("updated", "maintenance", None))
            out.append(Settlement(fid, decision, why, fact=fact))
        for fid in sorted(self.delete):
            decision, why, into = self.reasons.get(fid, ("expired", "maintenance", None))
            out.append(Settlement(fid, decision, why, into=into))
        return out


def _newest_first(facts: Iterable[Fact]) -> list[Fact]:
    return sorted(facts, key=lambda f: (f.created_at or datetime.min, f.id), reverse=True)


def near_duplicate_groups(facts: Sequence[Fact], max_distance: int) -> list[list[Fact]]:
    """Groups of active facts whose SimHash fingerprints are within ``max_distance`` bits of the
    group's newest fact (greedy, newest first). Facts with different keys never merge."""
    pending = _newest_first(facts)
    prints = {f.id: simhash(f.text) for f in pending}
    groups: list[list[Fact]] = []
    used: set[str] = set()
    for head in pending:
        if head.id in used:
            continue
        group = [head]
        used.add(head.id)
        for other in pending:
            if other.id in used or other.key != head.key:
                continue
            if hamming_distance(prints[head.id], prints[other.id]) <= max_distance:
                group.append(other)
                used.add(other.id)
        if len(group) > 1:
            groups.append(group)
    return groups


def plan_maintenance(
    facts: Sequence[Fact],
    now: datetime,
    *,
    expiry: ExpiryPolicy,
    near_duplicate_distance: int,
    protected_ids: frozenset[str] = frozenset(),
) -> MaintenancePlan:
    """Decide, for one user's facts (all of them, active or not):

    1. near-duplicates (SimHash): keep the newest, merge tags, keep the highest importance,
       and keep each older text as one of its phrasings (``near_duplicates.phrasings_after``;
       one that would take it over ``MAX_PHRASINGS`` stays a fact of its own);
    2. newest wins among active facts sharing a key: older ones get ``valid_to``;
    3. expiry: facts past their own ``expires_at`` (or, with ``expiry.by_importance``, their
       importance's age) are deleted,
       except ``protected_ids`` (facts consolidated into MEMORY.md stay).
    Superseded facts are history and are kept, unless they expire.
    """
    plan = MaintenancePlan(counts={"near_duplicates": 0, "superseded": 0, "expired": 0})
    current = {f.id: f for f in facts}

    active = [f for f in current.values() if f.is_active(now)]
    for group in near_duplicate_groups(active, near_duplicate_distance):
        keep, *candidates = group
        phrasings, drop = keep.phrasings, []
        for fact in candidates:  # each older text stays, as a phrasing of the newest
            joined = phrasings_after(replace(keep, phrasings=phrasings), fact)
            if len(joined) <= MAX_PHRASINGS:
                phrasings = joined
                drop.append(fact)
        if not drop:
            continue
        tags = tuple(dict.fromkeys(t for f in (keep, *drop) for t in f.tags))[:MAX_TAGS]
        importance = max(f.importance for f in (keep, *drop))
        if (tags, importance, phrasings) != (keep.tags, keep.importance, keep.phrasings):
            merged = replace(keep, tags=tags, importance=importance, phrasings=phrasings)
            current[keep.id] = plan.update[keep.id] = merged
            ids = ", ".join(f.id for f in drop)
            plan.decide(keep.id, "updated", f"merged with its near-duplicates {ids}")
        for fact in drop:
            plan.delete.add(fact.id)
            current.pop(fact.id)
            bits = hamming_distance(simhash(keep.text), simhash(fact.text))
            why = (
                f"a near-duplicate of {keep.id}, which is newer (SimHash {bits} bits apart, "
                f"at most {near_duplicate_distance})"
            )
            plan.decide(fact.id, "merged", why, into=keep.id)
        plan.counts["near_duplicates"] += len(drop)

    by_key: dict[str, list[Fact]] = {}
    for fact in current.values():
        if fact.key is not None and fact.is_active(now):
            by_key.setdefault(fact.key, []).append(fact)
    for group in by_key.values():
        newest, *older = _newest_first(group)
        for fact in older:
            closed = replace(fact, superseded_by=newest.id, valid_to=newest.created_at or now)
            current[fact.id] = plan.update[fact.id] = closed
            plan.counts["superseded"] += 1
            plan.decide(fact.id, "superseded", f"newest wins on key {fact.key!r}: {newest.id}")

    for fact in list(current.values()):
        if fact.id in protected_ids:
            continue
        deadline = expiry.expires_at(fact)
        if deadline is not None and deadline <= now:
            plan.delete.add(fact.id)
            plan.update.pop(fact.id, None)
            current.pop(fact.id)
            plan.counts["expired"] += 1
            plan.decide(fact.id, "expired", _expired_why(fact, deadline))
    return plan


def _expired_why(fact: Fact, deadline: datetime) -> str:
    when = deadline.isoformat(timespec="seconds")
    if fact.expires_at is not None:
        return f"past its expires_at, {when}"
    days = (deadline - fact.created_at).days if fact.created_at else 0
    return f"importance {fact.importance}: past its {days}-day lifetime, {when}"


def plan_prune(
    facts: Sequence[Fact],
    now: datetime,
    *,
    expiry: ExpiryPolicy,
    max_importance: int | None = None,
    protected_ids: frozenset[str] = frozenset(),
) -> list[tuple[Fact, str]]:
    """What ``memory_prune`` would forget, with why: ``expired`` (the fact's own expiry, or
    its age for its importance; facts MEMORY.md holds, ``protected_ids``, do not age out) or
    ``low_importance`` (``max_importance`` or less). Superseded facts are history, not noise:
    they stay. Least important and oldest first."""
    out: list[tuple[Fact, str]] = []
    for fact in facts:
        if fact.superseded_by is not None or fact.valid_to is not None:
            continue
        own = fact.expires_at is not None and fact.expires_at <= now
        aged = expiry.expires_at(fact)
        if own or (fact.id not in protected_ids and aged is not None and aged <= now):
            out.append((fact, "expired"))
        elif max_importance is not None and fact.importance <= max_importance:
            out.append((fact, "low_importance"))
    oldest = datetime.min.replace(tzinfo=now.tzinfo)
    return sorted(out, key=lambda pair: (pair[0].importance, pair[0].created_at or oldest))
