"""The Qdrant backend's recall: every visible scope's legs in batched engine requests.

On a server a recall over the user's, the agent's and the tenant's memory asks once: two
requests (dense, BM25) per owner in one batch, each with the owner's own filter and BM25 IDF
corpus, so each owner's hits are exactly what asking it alone returns (one round trip). Key
races (``qdrant.key_race``) are resolved per owner after the batch; an owner with a hit that
lost its race is asked again, alone, without it. In-process (Edge, no round trip to save) the
first scope is asked first and the wider ones, in one batch, only for hits above its least
score per leg when it filled the depth (``store_values.merge_floors``): reading a hit's
payload is most of Edge's cost, and those hits could not reach the recall's merged cut. A
small shared scope the process holds in memory (``qdrant.scope_mirror``) is scored there, with
the same floors, and costs no engine request at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from indexing.sparse import query_vector, terms_by_id
from memory_service.config.retrieval import Leg
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.qdrant.engine import QdrantEngine
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.key_race import KeyRaces
from memory_service.longterm.qdrant.layout import DENSE, SPARSE
from memory_service.longterm.qdrant.payload import fact_of
from memory_service.longterm.qdrant.query_plan import OwnerSearch, QueryPlan, ScoredHit
from memory_service.longterm.qdrant.scope_mirror import ScopeMirror
from memory_service.longterm.store_values import (
    NO_CANDIDATES,
    Candidates,
    NearestRequest,
    ReadView,
    SearchRequest,
    merge_floors,
)


def read_scope(
    ctx: RuntimeContext,
    view: ReadView,
    expiry: ExpiryPolicy,
    raced: set[str] | None = None,
    flagged: set[str] | None = None,
) -> OwnerFilter:
    """``view`` as payload conditions, so Qdrant applies it inside each leg; ``raced``:
    facts that lost a key race, which ``view`` no longer admits; ``flagged``: with a
    ``needs_verification`` filter, the owner's facts that need verification
    (``flagged_ids``), asked for by id or left out by id."""
    excluded = set(raced or ())
    ids = None
    if flagged is not None and view.filter.needs_verification:
        ids = sorted(flagged)
    elif flagged is not None:
        excluded |= flagged
    return OwnerFilter.of(
        ctx,
        ids=ids,
        open_only=not view.history,
        live_at=view.now,
        expiry=expiry,
        valid_at=view.filter.as_of,
        facts=view.filter,
        exclude_ids=sorted(excluded) if excluded else None,
    )


def flagged_ids(
    engine: QdrantEngine, ctx: RuntimeContext, view: ReadView, expiry: ExpiryPolicy
) -> set[str] | None:
    """With a ``needs_verification`` filter, the ids of the owner's facts ``view`` admits
    otherwise that need verification at its moment (None without one). Decay depends on a
    fact's kind, confidence and age together, which no payload condition can compare, so
    the owner's admitted facts are read once first (a filtered read pays one scroll of the
    owner's points) and the legs then ask by id."""
    if view.filter.needs_verification is None:
        return None
    plain = replace(view, filter=replace(view.filter, needs_verification=None))
    return {
        p.id
        for p in engine.scroll(read_scope(ctx, plain, expiry))
        if view.decay.needs_verification(fact_of(p.id, p.payload), view.moment)
    }


@dataclass(frozen=True, slots=True)
class _Answer:
    """One owner's part of a query: hits per engine leg, their payloads by id, and the hits
    that key-race resolution changed."""

    results: dict[str, list[ScoredHit]]
    payloads: dict[str, dict]
    resolved: dict[str, Fact]


class Searcher:
    """Each owner's candidates of one recall, over one engine."""

    def __init__(self, engine: QdrantEngine, races: KeyRaces) -> None:
        self.engine = engine
        self._races = races

    def candidates(
        self,
        owners: Sequence[RuntimeContext],
        request: SearchRequest,
        *,
        expiry: ExpiryPolicy,
        coverage: bool = False,
        mirrors: Sequence[ScopeMirror | None] | None = None,
    ) -> list[Candidates]:
        """Each owner's legs for ``request`` (its vector for the dense leg, its terms as the
        sparse query) over what its view admits (``expiry``: the memory's, as of this call)
        once key races are resolved: a hit that lost its key to a newer open fact is asked
        for again without it (rare: only after two writers raced), so each leg still fills
        to the depth. Each round asks every owner still pending in one engine request.
        ``coverage``: each lexical hit says which query terms it holds (query coverage).
        ``mirrors``: per owner, its points held in memory (``qdrant.scope_mirror``, only
        where this process is the collection's one writer), which answer for it instead of
        the engine."""
        legs, depth, threshold, view = (
            request.legs,
            request.depth,
            request.threshold,
            request.view,
        )
        dense = request.vector
        sparse = query_vector(request.terms) if "bm25" in legs else None
        sparse = sparse if sparse else None  # no terms: no lexical hit
        raced: list[set[str]] = [set() for _ in owners]
        resolved: list[dict[str, Fact]] = [{} for _ in owners]
        found: dict[int, Candidates] = {}
        # each query term by id: a hit's matched terms are those its sparse vector holds
        term_ids = terms_by_id(request.terms) if coverage else None
        held = list(mirrors) if mirrors is not None else [None] * len(owners)
        flagged = [
            None if held[i] is not None else flagged_ids(self.engine, owner, view, expiry)
            for i, owner in enumerate(owners)
        ]

        def ask(indices: Sequence[int], floors: Mapping[str, float] | None) -> None:
            """``floors``: per retrieval leg, the score a hit must beat."""
            pending = []
            for i in indices:
                mirror = held[i]
                if mirror is None:
                    pending.append(i)
                    continue
                found[i] = mirror.candidates(
                    legs,
                    view,
                    expiry,
                    floors,
                    dense=dense,
                    sparse=sparse,
                    limit=depth,
                    threshold=threshold,
                    term_ids=term_ids,
                )
            engine_floors = {ENGINE_LEG[leg]: f for leg, f in (floors or {}).items()} or None
            answers: dict[int, _Answer] = {}
            while pending:
                plan = QueryPlan.of(
                    [
                        _search(owners[i], view, expiry, raced[i], engine_floors, flagged[i])
                        for i in pending
                    ],
                    dense=dense,
                    sparse=sparse,
                    limit=depth,
                    threshold=threshold,
                    asked_terms=term_ids,
                )
                batch = self.engine.query(plan)
                again = []
                for i, results in zip(pending, batch, strict=True):
                    results = _above(results, engine_floors)
                    payloads = {h.id: h.payload for hits in results.values() for h in hits}
                    answers[i] = _Answer(results, payloads, resolved[i])
                    if self._lost_race(owners[i], payloads, view, raced[i], resolved[i]):
                        again.append(i)
                pending = again
            for i, answer in answers.items():
                found[i] = _candidates_of(legs, answer, self._reader(owners[i]))

        if self.engine.shared or len(owners) == 1:  # a server: one round trip for all
            ask(range(len(owners)), None)
        else:  # in-process: the first scope, then the wider ones above its merged cut
            ask([0], None)
            ask(range(1, len(owners)), merge_floors(found[0], depth))
        return [found[i] for i in range(len(owners))]

    def nearest(
        self,
        owner: RuntimeContext,
        request: NearestRequest,
        *,
        expiry: ExpiryPolicy,
        mirror: ScopeMirror | None = None,
    ) -> list[Candidates]:
        """Per vector of ``request``, the owner's dense-leg candidates (at most its depth,
        cosine at least its threshold) over what its view admits, all in one engine request
        (or from the owner's ``mirror``). Key races are not resolved: only unkeyed facts are
        wanted."""
        vectors, depth, threshold, view = (
            request.vectors,
            request.depth,
            request.threshold,
            request.view,
        )
        if not vectors:
            return []
        if mirror is not None:
            return [
                mirror.candidates(
                    ("dense",),
                    view,
                    expiry,
                    None,
                    dense=v,
                    sparse=None,
                    limit=depth,
                    threshold=threshold,
                    term_ids=None,
                )
                for v in vectors
            ]
        search = _search(owner, view, expiry, set())
        if self.engine.count(search.scope) == 0:  # a new owner's first record: one count,
            return [NO_CANDIDATES] * len(vectors)  # not a request per vector (files: free)
        plan = QueryPlan.nearest(search, vectors, limit=depth, threshold=threshold)
        reader = self._reader(owner)
        out = []
        for results in self.engine.query(plan):
            payloads = {h.id: h.payload for hits in results.values() for h in hits}
            out.append(_candidates_of(("dense",), _Answer(results, payloads, {}), reader))
        return out

    def _reader(self, ctx: RuntimeContext) -> Callable[[Sequence[str]], dict[str, Fact]]:
        """Reads whole facts of ``ctx`` by id in one engine request (a hit carries only its
        ``CANDIDATE_FIELDS``); ids no longer stored are left out."""

        def read(fact_ids: Sequence[str]) -> dict[str, Fact]:
            return self.engine.facts(OwnerFilter.of(ctx), fact_ids)

        return read

    def _lost_race(
        self,
        ctx: RuntimeContext,
        payloads: Mapping[str, dict],
        view: ReadView,
        raced: set[str],
        resolved: dict[str, Fact],
    ) -> bool:
        """Whether a hit among ``payloads`` lost its key race and ``view`` no longer admits
        it (added to ``raced``; the changed hits to ``resolved``): the owner is asked again.
        Only writers in other processes race (a server); an Edge folder has one writer, so
        its searches skip the check (a visible share of a search)."""
        if not self.engine.shared or not self._races.rivals(ctx, payloads):
            return False
        whole = self._reader(ctx)(list(payloads))
        changed = self._races.losers(ctx, list(whole.values()))
        resolved.update(changed)
        lost = {fid for fid, fact in changed.items() if not view.admits(fact)} - raced
        raced |= lost  # rivals, but every hit holding its key at the moment: nothing lost
        return bool(lost)


ENGINE_LEG = {"bm25": SPARSE, "dense": DENSE}  # a retrieval leg's name in the engine


def _above(
    results: dict[str, list[ScoredHit]], floors: Mapping[str, float] | None
) -> dict[str, list[ScoredHit]]:
    """``results`` without the hits at or below their leg's floor (the engine's threshold
    keeps a hit equal to it)."""
    if not floors:
        return results
    return {
        leg: [h for h in hits if leg not in floors or h.score > floors[leg]]
        for leg, hits in results.items()
    }


def _search(
    ctx: RuntimeContext,
    view: ReadView,
    expiry: ExpiryPolicy,
    raced: set[str],
    floors: Mapping[str, float] | None = None,
    flagged: set[str] | None = None,
) -> OwnerSearch:
    """One owner's part of a query: ``view``'s scope, and the BM25 IDF over the open facts,
    lost races excluded, or over all of them for a read about the past (as files)."""
    idf_corpus = OwnerFilter.of(
        ctx, open_only=not view.history, exclude_ids=None if view.history else raced
    )
    return OwnerSearch(read_scope(ctx, view, expiry, raced, flagged), idf_corpus, floors)


def _candidates_of(
    legs: tuple[Leg, ...],
    answer: _Answer,
    read: Callable[[Sequence[str]], dict[str, Fact]],
) -> Candidates:
    """One owner's ``Candidates``: each leg's hits in the files backend's order, each a
    ``LegHit`` as the engine made it (with the query terms its stored BM25 document holds,
    where the plan asked: query coverage reads them from the engine, not by tokenizing every
    candidate again); the facts of the hits fusion keeps are read whole in one request
    (``read``), and a key is read from the hit's own fields (comparing scopes reads the key
    of every wider candidate)."""
    leg_hits: dict[str, list[LegHit]] = {
        leg: _ordered(answer.results.get(engine_leg, []))
        for leg, engine_leg in ENGINE_LEG.items()
        if leg in legs
    }
    payloads, built = answer.payloads, dict(answer.resolved)

    def load(fact_ids: Sequence[str]) -> None:
        built.update(read([fid for fid in fact_ids if fid not in built]))

    def fact(fid: str) -> Fact:
        if fid not in built:
            load([fid])
        return built[fid]  # KeyError: deleted since the query

    return Candidates(leg_hits, fact, key_of=lambda fid: payloads[fid].get("key"), load=load)


def _ordered(hits: list[ScoredHit]) -> list[ScoredHit]:
    """Best first; equal scores (to 6 decimals) in (created_at, id) order, as in files.

    ``created_at`` is stored as UTC ISO-8601, so its string order is its time order. An
    engine answers best first: only each run of hits that tie is sorted again, and a score
    is rounded only where it is within 2e-6 of the one before (further apart, two scores
    cannot round to one value)."""
    scores = [h.score for h in hits]
    closest = min((a - b for a, b in zip(scores, scores[1:], strict=False)), default=1.0)
    if closest > 2e-6:  # best first, no two within rounding of each other
        return hits
    if closest < 0:  # not best first
        return sorted(hits, key=lambda h: (-round(h.score, 6), _tie_order(h)))
    out: list[ScoredHit] = []
    start = 0
    for end in range(1, len(hits) + 1):
        if (
            end == len(hits)
            or scores[end - 1] - scores[end] > 2e-6
            or round(scores[end], 6) != round(scores[start], 6)
        ):
            run = hits[start:end]
            out += sorted(run, key=_tie_order) if len(run) > 1 else run
            start = end
    return out


def _tie_order(hit: ScoredHit) -> tuple[str, str]:
    return hit.payload.get("created_at") or "", hit.id
