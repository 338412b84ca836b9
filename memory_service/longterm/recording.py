"""What recording a batch of facts means, decided once for every backend.

Given the stamped incoming facts, the user's facts that already exist under those ids, and the
user's open facts by key, ``plan_record`` says what each incoming fact becomes (``created``,
``duplicate``, ``superseded`` or ``merged``), which facts to write, and which existing facts to
close. A backend only reads what the plan needs and writes what it says, so idempotence and
supersession cannot drift apart between backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from memory_service.domain.facts import Fact, RecordResult, Source
from memory_service.domain.limits import MAX_PHRASINGS
from memory_service.longterm.near_duplicates import merged, phrasings_after


@dataclass(slots=True)
class RecordPlan:
    results: list[RecordResult] = field(default_factory=list)
    new: dict[str, Fact] = field(default_factory=dict)  # to write, in order
    closed: dict[str, Fact] = field(default_factory=dict)  # existing facts, now superseded
    revived: set[str] = field(default_factory=set)  # existing inactive facts written anew
    # duplicates that brought the provenance the stored fact lacked, and stored facts that
    # near-duplicates merged into: rewritten where stored
    amended: dict[str, Fact] = field(default_factory=dict)
    merged_into: dict[str, str] = field(default_factory=dict)  # incoming id -> fact it joined


def plan_record(
    stamped: Sequence[Fact],
    existing: Mapping[str, Fact],
    open_by_key: Mapping[str, Fact],
    now: datetime,
    raced: Mapping[str, Fact] | None = None,
    near: Mapping[str, Fact] | None = None,
) -> RecordPlan:
    """Rules, in order, for each incoming fact:

    - same id as a fact in this batch or an active stored fact: ``duplicate``. The stored fact
      is confirmed: its ``updated_at`` becomes the duplicate's when that is later (its
      confidence stops decaying from the older time); and it gets provenance it lacks: a
      duplicate that carries a ``source`` (and a session) for a fact stored without one
      attaches it (``amended``; a fact's first source is kept, never replaced). Nothing else
      is written;
    - a near-duplicate (``near``: incoming id -> the stored or earlier incoming fact the base
      found for it, ``longterm.near_duplicates``) of a fact still active as this plan has it:
      ``merged`` into it (``near_duplicates.merged``: rewritten, ``amended``, or in this
      batch's writes); the result names that fact;
    - same id as an inactive stored fact (superseded or expired): written anew (revived);
    - a key held by an open fact: the newer of the two (by ``created_at``) stays open and the
      older is closed (``superseded_by``, ``valid_to``). The incoming fact is ``superseded``
      either way: with ``superseded_ids`` when it closed the other, with none when it was the
      older one (a racing writer lost), so the caller knows recall will not show it;
    - an incoming fact that is already closed or expired (an import) supersedes nothing and
      is ``created``: its sender knew it was hidden.

    ``raced``: stored facts that lost a key race, closed as reading already shows them; each
    is written down (``closed``) unless this batch writes it anew. No result reports them:
    they were hidden before this record.
    """
    plan = RecordPlan()
    by_key = dict(open_by_key)
    for fact in stamped:
        known = existing.get(fact.id)
        if fact.id in plan.new or (known is not None and known.is_active(now)):
            _amend(plan, known, fact)
            plan.results.append(RecordResult(fact.id, "duplicate"))
            continue
        target = (near or {}).get(fact.id)
        if target is not None and _merge(plan, target, fact, now):
            plan.results.append(RecordResult(target.id, "merged", merged_into=target.id))
            continue
        if known is not None:
            plan.revived.add(fact.id)
        superseded: list[str] = []
        lost = False  # closed on arrival: a newer open fact holds its key
        opens_key = fact.key is not None and fact.is_active(now)
        older = by_key.get(fact.key) if opens_key else None
        if older is not None and older.id != fact.id:
            if (older.created_at or now) > (fact.created_at or now):
                fact = replace(fact, superseded_by=older.id, valid_to=older.created_at)
                lost = True
            else:
                latest = plan.new.get(older.id) or plan.amended.pop(older.id, None) or older
                shut = replace(latest, superseded_by=fact.id, valid_to=fact.created_at)
                superseded.append(older.id)
                if older.id in plan.new:
                    plan.new[older.id] = shut
                else:
                    plan.closed[older.id] = shut
        if opens_key and fact.superseded_by is None:
            by_key[fact.key] = fact
        plan.new[fact.id] = fact
        status = "superseded" if superseded or lost else "created"
        plan.results.append(RecordResult(fact.id, status, tuple(superseded)))
    for fid, shut in (raced or {}).items():
        if fid not in plan.new and fid not in plan.closed:
            plan.closed[fid] = shut
    return plan


def _merge(plan: RecordPlan, target: Fact, fact: Fact, now: datetime) -> bool:
    """Merge ``fact`` into the latest version of ``target`` if that is still active (an
    earlier fact of this batch may have closed it); whether it was merged."""
    if target.id in plan.closed:
        return False
    writes = plan.new if target.id in plan.new else plan.amended
    latest = writes.get(target.id, target)
    if not latest.is_active(now) or len(phrasings_after(latest, fact)) > MAX_PHRASINGS:
        return False  # closed, or full of phrasings, by an earlier fact of this batch
    writes[target.id] = confirmed(merged(latest, fact), fact)
    plan.merged_into[fact.id] = target.id
    return True


def _amend(plan: RecordPlan, known: Fact | None, again: Fact) -> None:
    """A duplicate's provenance and update time onto the latest version of its fact: in this
    batch's writes, or the stored fact (then rewritten in place: ``amended``)."""
    for planned in (plan.new, plan.closed, plan.amended):
        if again.id in planned:
            planned[again.id] = confirmed(with_provenance(planned[again.id], again), again)
            return
    if (
        known is not None
        and (amended := confirmed(with_provenance(known, again), again)) is not known
    ):
        plan.amended[again.id] = amended


def confirmed(stored: Fact, again: Fact) -> Fact:
    """``stored`` updated when ``again`` (the same text recorded again) was, if that is later:
    recording a fact again confirms it. The same fact otherwise."""
    then, now = stored.last_updated, again.last_updated
    if now is None or (then is not None and now <= then):
        return stored
    return replace(stored, updated_at=now)


def with_provenance(stored: Fact, again: Fact) -> Fact:
    """``stored`` with the provenance ``again`` (the same text recorded again) brings and it
    lacks: its ``source`` when it has none, and its session. The same fact otherwise: text,
    key, metadata and creation time stay; a source it has is never replaced."""
    if not _says_nothing(stored.source) or _says_nothing(again.source):
        return stored
    return replace(stored, source=again.source, session_id=stored.session_id or again.session_id)


def _says_nothing(source: Source | None) -> bool:
    return source is None or source.is_empty()
