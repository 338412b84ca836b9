"""What a read may return: the caller's metadata filter, the moment it asks about, expiry.

``FactFilter`` is the one value retrieve and list take for everything a caller narrows by
(kind, tags, importance, key, creation time, whether it needs verification) and the moment
asked about (``as_of``). It is
checked once (``check``) and then applied by every backend inside each leg, before top-k
(Qdrant: payload conditions; files: a candidate mask): ``matches`` is the rule they all follow.

``ExpiryPolicy`` is the expiry rule that maintenance deletes by and that every read hides by,
so an expired fact is never returned whether or not maintenance ran: a fact's own
``expires_at`` always, the importance TTL only when switched on. ``ConfidenceDecay``
is the age discount of a fact's confidence by its kind, and the threshold below which it needs
verification.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from operator import attrgetter

from memory_service.domain.characters import NUL_PROBLEM, has_nul
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import (
    FACT_KINDS,
    TIME_EXAMPLE,
    Fact,
    InvalidTimeError,
    canonical_kind,
    kind_error,
    parse_time,
)
from memory_service.domain.limits import (
    MAX_IMPORTANCE,
    MAX_KEY_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MIN_IMPORTANCE,
)

DAY_SECONDS = 86_400.0


def _bad(field: str, message: str) -> InvalidInputError:
    return InvalidInputError(f"{field}: {message}", code="invalid_filter")


def _time(field: str, value: datetime | str | None) -> datetime | None:
    if value == "":  # asked for, but empty: not "no filter"
        raise _bad(field, f"must be an ISO-8601 time ({TIME_EXAMPLE}), not ''")
    try:
        return parse_time(value, field)
    except InvalidTimeError as exc:
        raise _bad(field, exc.reason) from None


@dataclass(frozen=True, slots=True)
class FactFilter:
    """Narrows retrieve and list. Empty fields do not narrow.

    - ``kinds``: any of these kinds; ``tags_any``: at least one of these tags;
      ``tags_all``: every one of them; ``min_importance``: importance at least this;
      ``key``: exactly this subject key;
    - ``created_after`` (inclusive) / ``created_before`` (exclusive): the creation-time range;
    - ``as_of``: what was valid at that moment instead of now: facts recorded by then and not
      yet superseded or closed then (a fact superseded later is returned, one recorded later
      is not). Never in the future;
    - ``needs_verification``: True, only facts whose decayed confidence is below the
      verification threshold at the moment asked about; False, only the others (the rule is
      ``ConfidenceDecay``'s, so ``matches`` leaves it to the ``ReadView``).
    """

    kinds: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    tags_all: tuple[str, ...] = ()
    min_importance: int | None = None
    key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    as_of: datetime | None = None
    needs_verification: bool | None = None

    @property
    def is_empty(self) -> bool:
        return self is NO_FILTER or all(v in (None, ()) for v in _filter_values(self))

    def check(self, now: datetime) -> FactFilter:
        """A copy with aware UTC times, or ``InvalidInputError`` (``invalid_filter``) naming
        the field at fault."""
        for name in ("kinds", "tags_any", "tags_all"):
            if isinstance(getattr(self, name), str):
                raise _bad(name, "a list, not a string")
        kinds = tuple(canonical_kind(k) for k in self.kinds)
        bad_kinds = [k for k in kinds if k not in FACT_KINDS]
        if bad_kinds:
            raise _bad("kind", kind_error(bad_kinds[0]))
        for name in ("tags_any", "tags_all"):
            tags = getattr(self, name)
            if len(tags) > MAX_TAGS:
                raise _bad(name, f"at most {MAX_TAGS} tags, not {len(tags)}")
            if any(not isinstance(t, str) or not t or len(t) > MAX_TAG_CHARS for t in tags):
                raise _bad(name, f"tags must be 1-{MAX_TAG_CHARS} characters")
            if has_nul(tags):
                raise _bad(name, f"tags {NUL_PROBLEM}")
        low, high = MIN_IMPORTANCE, MAX_IMPORTANCE
        value = self.min_importance
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise _bad("min_importance", f"an integer {low}-{high}")
        if self.key is not None and (
            not isinstance(self.key, str) or not self.key.strip() or len(self.key) > MAX_KEY_CHARS
        ):
            raise _bad("key", f"1-{MAX_KEY_CHARS} characters")
        if self.key is not None and has_nul(self.key):
            raise _bad("key", NUL_PROBLEM)
        after = _time("created_after", self.created_after)
        before = _time("created_before", self.created_before)
        if after is not None and before is not None and after >= before:
            raise _bad("created_before", "must be later than created_after")
        as_of = _time("as_of", self.as_of)
        if as_of is not None and as_of > now:
            raise _bad("as_of", f"{as_of.isoformat()} is in the future")
        if self.needs_verification is not None and not isinstance(self.needs_verification, bool):
            raise _bad("needs_verification", "true or false")
        return replace(
            self,
            kinds=tuple(dict.fromkeys(kinds)),
            tags_any=tuple(dict.fromkeys(self.tags_any)),
            tags_all=tuple(dict.fromkeys(self.tags_all)),
            created_after=after,
            created_before=before,
            as_of=as_of,
        )

    def matches(self, fact: Fact) -> bool:
        """The metadata conditions (not time validity: see ``valid_at``)."""
        if self.kinds and fact.kind not in self.kinds:
            return False
        if self.tags_any and not set(self.tags_any) & set(fact.tags):
            return False
        if self.tags_all and not set(self.tags_all) <= set(fact.tags):
            return False
        if self.min_importance is not None and fact.importance < self.min_importance:
            return False
        if self.key is not None and fact.key != self.key:
            return False
        created = parse_time(fact.created_at)
        if self.created_after is not None and (created is None or created < self.created_after):
            return False
        return not (
            self.created_before is not None and (created is None or created >= self.created_before)
        )


NO_FILTER = FactFilter()
_filter_values = attrgetter(*(f.name for f in fields(FactFilter)))


def valid_at(fact: Fact, moment: datetime) -> bool:
    """Recorded by ``moment`` and not yet closed then. A fact marked superseded without a
    ``valid_to`` was closed at an unknown time: valid at no past moment."""
    created = parse_time(fact.created_at)
    if created is not None and created > moment:
        return False
    valid_to = parse_time(fact.valid_to)
    if valid_to is None:
        return fact.superseded_by is None
    return valid_to > moment


@dataclass(frozen=True, slots=True)
class ExpiryPolicy:
    """When a fact expires: at its own ``expires_at``, else never, unless ``by_importance``
    (then a fact without ``expires_at`` expires by age for its importance: 10 never, 5-9 after
    30 days, below 5 after 7 days; the Solon harness's tiers).

    Off by default: long-term memory is kept until it is deleted (persistent, retained for
    years, and the daily records are never deleted: docs/decisions.md), so a fact recorded
    with the default importance 5 is still recalled a year on."""

    never_at: int = 10  # importance >= this: never
    long_at: int = 5  # importance >= this: ``long_days``
    long_days: int = 30
    short_days: int = 7
    by_importance: bool = False

    def expires_at(self, fact: Fact) -> datetime | None:
        if fact.expires_at is not None:
            return parse_time(fact.expires_at)
        if not self.by_importance:
            return None
        return self.deadline(None, fact.importance, parse_time(fact.created_at))

    def deadline(
        self, expires_at: datetime | None, importance: int, created_at: datetime | None
    ) -> datetime | None:
        """``expires_at`` of a fact with these values (a store that keeps them as columns
        reads no fact for it)."""
        if expires_at is not None:
            return expires_at
        if not self.by_importance or importance >= self.never_at or created_at is None:
            return None
        days = self.long_days if importance >= self.long_at else self.short_days
        try:
            return created_at + timedelta(days=days)
        except OverflowError:  # created within ``days`` of 9999-12-31: no deadline is later
            return None

    def expired(self, fact: Fact, now: datetime) -> bool:
        deadline = self.expires_at(fact)
        return deadline is not None and deadline <= now


@dataclass(frozen=True, slots=True)
class ConfidenceDecay:
    """A fact's confidence at a moment: ``C0 * exp(-rate * t)``, ``C0`` its stored (initial)
    confidence, ``t`` the days since it was recorded or last confirmed (``Fact.last_updated``)
    and ``rate`` its kind's, per day; below ``verify_below`` it needs verification.

    The defaults (docs/decisions.md): an episodic memory (an ``event``) loses 1 % a
    day, a factual one (a ``fact``) 0.1 %, procedural (``procedure``) and semantic
    (``preference``) memories none; below 0.5 a memory is verified again. So a person's event
    (1.0) needs verification after ln 2 / 0.01 = 69 days, one the flush extracted (0.8) after
    47 days, a fact after 693 and 470 days; a procedure or a preference only when its own
    confidence is below 0.5."""

    event: float = 0.01
    fact: float = 0.001
    procedure: float = 0.0
    preference: float = 0.0
    verify_below: float = 0.5

    def rate(self, kind: str) -> float:
        return float(getattr(self, kind, 0.0)) if kind in FACT_KINDS else 0.0

    def at(self, fact: Fact, moment: datetime) -> float:
        stored = float(fact.confidence)
        since = fact.last_updated
        rate = self.rate(fact.kind)
        if rate <= 0.0 or since is None:
            return stored
        age_days = max(0.0, (moment - since).total_seconds() / DAY_SECONDS)
        return stored * math.exp(-rate * age_days)

    def needs_verification(self, fact: Fact, moment: datetime) -> bool:
        return self.at(fact, moment) < self.verify_below

    def marked(self, fact: Fact, moment: datetime) -> Fact:
        """``fact`` with ``needs_verification`` as of ``moment``."""
        return self.flagged(fact, self.at(fact, moment))

    def flagged(self, fact: Fact, confidence: float) -> Fact:
        """``fact`` with ``needs_verification`` as its decayed ``confidence`` says."""
        return fact.flagged_for_verification(confidence < self.verify_below)
