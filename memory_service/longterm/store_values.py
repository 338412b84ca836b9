"""The values between ``BaseLongTermMemory`` and its backends: what a recall asks
(``SearchRequest``) and what a record's near-duplicate check asks (``NearestRequest``), what a
backend read before a write (``StoredFacts``), each leg's candidates (``Candidates``, and
``ScopedCandidates`` over several scopes), what a read may return (``ReadView``), and the id,
time, hit and key-race rules every backend shares."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np

from memory_service.config.retrieval import Leg
from memory_service.domain.fact_filter import ConfidenceDecay, ExpiryPolicy, FactFilter, valid_at
from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.fusion import LegHit


@dataclass(slots=True)
class StoredFacts:
    """What a backend read of a user's stored facts before a write, under the write lock.

    ``by_id``: stored facts (at least those the write names); ``open_by_key``: the newest open
    fact per key (at least for the incoming keys; record only). A backend subclasses it to carry
    what its own write needs (the files backend its index, Qdrant the points' vectors).

    ``raced``: stored-open facts that lost a key race to the fact now holding their key (two
    writers recorded one key at once), already closed as reading resolves them
    (``resolve_key_race``); the record writes their closure down. A backend whose reads
    resolve races itself and writes them down elsewhere leaves it empty (files:
    ``settle_stored_facts``)."""

    by_id: Mapping[str, Fact]
    open_by_key: Mapping[str, Fact]
    raced: Mapping[str, Fact] = field(default_factory=dict, kw_only=True)


@dataclass(frozen=True, slots=True)
class Candidates:
    """Each leg's ranked hits (best first, the backend's tie order), and how to load the fact
    of a hit that survives fusion (only those are loaded). ``key_of``: a hit's ``key`` where
    the backend can read it without loading the fact (a recall over several scopes compares
    the key of every wider candidate); None: from the fact. ``text_of``: the same for a hit's
    text (fusion reads every candidate's script from it)."""

    legs: Mapping[str, list[LegHit]]
    fact: Callable[[str], Fact]
    key_of: Callable[[str], str | None] | None = None
    load: Callable[[Sequence[str]], None] | None = None
    text_of: Callable[[str], str] | None = None

    def facts(self, fact_ids: Sequence[str]) -> dict[str, Fact]:
        """The facts of these hits, by id: read at once where the backend reads them in one
        request (``load``: Qdrant reads the payloads of the hits that survive fusion alone);
        a hit whose fact is gone meanwhile (deleted by another call) is left out."""
        if self.load is not None:
            self.load(fact_ids)
        out: dict[str, Fact] = {}
        for fid in fact_ids:
            try:
                out[fid] = self.fact(fid)
            except KeyError:
                continue
        return out

    def readable(self, leg_hits: Mapping[str, list[LegHit]]) -> dict[str, list[LegHit]]:
        """``leg_hits`` without the hits whose fact another call deleted since the query,
        every fact read now in one request where the backend reads them after the query
        (``load``); a backend that read them with the query answers from what it read."""
        if self.load is None:
            return dict(leg_hits)
        return _readable(leg_hits, self.facts)

    def key(self, fact_id: str) -> str | None:
        """The ``key`` of the fact of hit ``fact_id``."""
        return self.key_of(fact_id) if self.key_of is not None else self.fact(fact_id).key

    def text(self, fact_id: str) -> str:
        """The text of the fact of hit ``fact_id``."""
        return self.text_of(fact_id) if self.text_of is not None else self.fact(fact_id).text


def merge_floors(first: Candidates, depth: int) -> dict[str, float]:
    """Per leg, the score a wider scope's hit must beat to reach a recall's merged cut to
    ``depth``: the least score of the first (narrowest) scope's leg, whose hits are never
    hidden and win ties (``BaseLongTermMemory._scoped_candidates``), when it filled ``depth``;
    no floor on a leg it did not fill. A backend that asks scopes one by one need not build
    (or read) the rest."""
    return {
        leg: min(h.score for h in hits) for leg, hits in first.legs.items() if len(hits) >= depth
    }


@dataclass(frozen=True, slots=True)
class ReadView:
    """What one read may return: ``filter`` (checked), at ``now``, under ``expiry``, with
    ``decay`` the rule its ``needs_verification`` filter asks about (at ``moment``).

    A fact is admitted when it matches the filter, is not expired at ``now`` (expiry is
    never undone by asking about the past: maintenance may already have deleted it), and is
    valid at the moment asked about: open now, or, with ``as_of``, recorded by then and not
    closed before then. Backends apply the same rule inside each leg (``admits`` is its
    definition; Qdrant writes it as payload conditions)."""

    filter: FactFilter
    now: datetime
    expiry: ExpiryPolicy
    decay: ConfidenceDecay = field(default_factory=ConfidenceDecay)

    @property
    def moment(self) -> datetime:
        return self.filter.as_of or self.now

    @property
    def history(self) -> bool:
        """Asks about the past: superseded facts may be admitted."""
        return self.filter.as_of is not None

    def matches(self, fact: Fact) -> bool:
        """The filter's metadata conditions, ``needs_verification`` included."""
        wanted = self.filter.needs_verification
        if wanted is not None and self.decay.needs_verification(fact, self.moment) != wanted:
            return False
        return self.filter.matches(fact)

    def admits(self, fact: Fact) -> bool:
        if self.expiry.expired(fact, self.now) or not self.matches(fact):
            return False
        if self.filter.as_of is not None:
            return valid_at(fact, self.filter.as_of)
        return fact.superseded_by is None and fact.valid_to is None


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One recall as a backend searches for it, built once by ``BaseLongTermMemory`` and
    handed to ``_candidates`` / ``_candidates_each`` for every scope it reads.

    ``text``: the query as asked; ``terms``: its lexical terms (``indexing.tokenize.
    query_terms``, what the BM25 leg and query coverage read); ``vector``: its dense vector
    (embedded as a query), None when the dense leg is not asked; ``legs``: the legs to
    search; ``depth``: candidates per leg; ``threshold``: the dense cosine floor (a backend
    may cut the dense leg there); ``view``: what the search may return."""

    text: str
    terms: tuple[str, ...]
    vector: np.ndarray | None
    legs: tuple[Leg, ...]
    depth: int
    threshold: float
    view: ReadView


@dataclass(frozen=True, slots=True)
class NearestRequest:
    """A record's near-duplicate search: each incoming fact's text and the dense vector it
    is stored with (a fact is compared with stored facts as an equal, not as a query), the
    dense leg only, up to ``depth`` candidates at cosine ``threshold`` or more each, over
    what ``view`` admits."""

    texts: tuple[str, ...]
    vectors: tuple[np.ndarray, ...]
    depth: int
    threshold: float
    view: ReadView

    def searches(self) -> list[SearchRequest]:
        """Each fact as a dense-only ``SearchRequest`` (for a backend that asks one by one)."""
        return [
            SearchRequest(text, (), vector, ("dense",), self.depth, self.threshold, self.view)
            for text, vector in zip(self.texts, self.vectors, strict=True)
        ]


@dataclass(frozen=True, slots=True)
class ScopedCandidates:
    """Each leg's candidates merged over a recall's scopes (``legs``), each hit's fact read
    from the scope that found it (``parts``: hit id -> that scope's ``Candidates``): the
    interface of ``Candidates``, so fusion reads one or several scopes alike."""

    legs: Mapping[str, list[LegHit]]
    parts: Mapping[str, Candidates]

    def fact(self, fact_id: str) -> Fact:
        return self.parts[fact_id].fact(fact_id)

    def facts(self, fact_ids: Sequence[str]) -> dict[str, Fact]:
        """As ``Candidates.facts``: one read per scope for the hits it found."""
        by_scope: dict[int, tuple[Candidates, list[str]]] = {}
        for fid in fact_ids:
            part = self.parts[fid]
            by_scope.setdefault(id(part), (part, []))[1].append(fid)
        read: dict[str, Fact] = {}
        for part, ids in by_scope.values():
            read.update(part.facts(ids))
        return {fid: read[fid] for fid in fact_ids if fid in read}

    def readable(self, leg_hits: Mapping[str, list[LegHit]]) -> dict[str, list[LegHit]]:
        """As ``Candidates.readable``, one read per scope that reads its facts late."""
        if all(part.load is None for part in self.parts.values()):
            return dict(leg_hits)
        return _readable(leg_hits, self.facts)

    def key(self, fact_id: str) -> str | None:
        return self.parts[fact_id].key(fact_id)

    def text(self, fact_id: str) -> str:
        return self.parts[fact_id].text(fact_id)


def _readable(
    leg_hits: Mapping[str, list[LegHit]], facts: Callable[[Sequence[str]], dict[str, Fact]]
) -> dict[str, list[LegHit]]:
    ids = list(dict.fromkeys(h.id for hits in leg_hits.values() for h in hits))
    present = facts(ids)
    if len(present) == len(ids):
        return dict(leg_hits)
    return {leg: [h for h in hits if h.id in present] for leg, hits in leg_hits.items()}


def _no_fact(fact_id: str) -> Fact:
    raise KeyError(fact_id)


NO_CANDIDATES = Candidates({}, _no_fact)


def canonical_ids(ids: Sequence[str]) -> list[str]:
    """The ids that can name a fact (canonical UUID strings), in order, once each: fact ids are
    derived uuid5 strings, so anything else names nothing, in every backend."""
    out = []
    for value in dict.fromkeys(v for v in ids if isinstance(v, str)):
        try:
            if str(uuid.UUID(value)) == value:
                out.append(value)
        except ValueError:
            continue
    return out


def utc_times(fact: Fact) -> Fact:
    """``fact`` with its times aware and in UTC (naive times are taken as UTC)."""
    return replace(
        fact,
        created_at=parse_time(fact.created_at),
        expires_at=parse_time(fact.expires_at),
        valid_to=parse_time(fact.valid_to),
    )


def is_hit(leg: str, score: float, threshold: float) -> bool:
    """What a leg's candidate must score to be a hit: the dense cosine at least ``threshold``;
    a BM25 score above 0, i.e. at least one shared term."""
    return score >= threshold if leg == "dense" else score > 0.0


def has_evidence(leg_hits: Mapping[str, Sequence[object]]) -> bool:
    """Whether a recall answers at all: with the dense leg asked beside another, only when it
    has a hit, i.e. some memory's cosine reaches ``threshold``. The threshold is on the dense
    cosine because it is the one score that means the same in every user's memory (BM25 and
    fused z-scores are relative to the memories at hand); shared words alone are no evidence
    that memory holds anything on the question. Without the gate, questions asked of another
    conversation's facts almost always got a memory; with it, rarely, at no visible cost to
    the questions' own recall (``memory-service bench``'s false-injection sweep;
    ``benchmarks/RESULTS.md``, "Recall threshold")."""
    return "dense" not in leg_hits or len(leg_hits) == 1 or bool(leg_hits["dense"])


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _age(fact: Fact) -> tuple[datetime, str]:
    return (parse_time(fact.created_at) or EPOCH, fact.id)


def stored_open(fact: Fact) -> bool:
    """Stored without a closing mark (``superseded_by``, ``valid_to``), expired or not: the
    facts that can race for a key."""
    return fact.superseded_by is None and fact.valid_to is None


def newest_holders(facts: Iterable[Fact]) -> dict[str, Fact]:
    """The fact that holds each key: the newest (``created_at``, then id) stored-open fact
    with that key among ``facts``. Two writers recording one key at the same moment (or a
    crash between a write and its closing rewrite, or a hand edit) can leave several open:
    every backend keeps this one, so no read returns two values for one key."""
    holders: dict[str, Fact] = {}
    ages: dict[str, tuple[datetime, str]] = {}
    for fact in facts:
        if fact.key is None or not stored_open(fact):
            continue
        age = _age(fact)
        if fact.key not in ages or age > ages[fact.key]:
            holders[fact.key], ages[fact.key] = fact, age
    return holders


def resolve_key_race(fact: Fact, holders: Mapping[str, Fact]) -> Fact:
    """``fact`` as reading resolves it: a stored-open fact whose key a newer open fact holds
    reads as superseded by that fact since the moment it was recorded (``valid_to``), as a
    record would have closed it; any other fact is returned as stored."""
    if fact.key is None or not stored_open(fact):
        return fact
    holder = holders.get(fact.key)
    if holder is None or holder.id == fact.id:
        return fact
    return replace(fact, superseded_by=holder.id, valid_to=holder.created_at)
