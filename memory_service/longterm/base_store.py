"""What every long-term backend must do the same way, done once (LangGraph's ``BaseStore``).

``BaseLongTermMemory`` implements the public ``LongTermMemory`` methods: input checks, fact
stamping and validation, the mode's legs, what counts as a hit in each leg (the dense
``threshold``, a shared term for BM25) and when a fused recall answers at all
(``store_values.has_evidence``), fusion, pagination, id handling and the closed state.
Every fact is redacted (``redaction.Redactor``) before it is stamped, and a near-duplicate of an
active fact is merged into it (``near_duplicates``: one dense-leg request per record batch).
A backend implements small hooks only: read what a write needs, write a record plan or
metadata changes, generate each leg's candidates, list, get, delete. So one bad input gives one
error, and one rule gives one result, whatever backend is configured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import ClassVar, TypeVar

import numpy as np

from indexing.embeddings import Embedder
from indexing.tokenize import query_terms
from memory_service.config.retrieval import (
    PRESETS,
    Leg,
    Mode,
    RetrievalConfig,
    legs_for_mode,
    tuning_for,
)
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import (
    BackendUnavailableError,
    InactiveFactError,
    InvalidInputError,
)
from memory_service.domain.fact_filter import (
    NO_FILTER,
    ConfidenceDecay,
    ExpiryPolicy,
    FactFilter,
)
from memory_service.domain.facts import Fact, Recall, RecordResult, utcnow
from memory_service.domain.pagination import Page, check_page, paginate
from memory_service.domain.redaction import Redactor
from memory_service.longterm.access import AccessLog, AccessMark
from memory_service.longterm.evidence import Evidence
from memory_service.longterm.fusion import fuse_legs, validate_query, wants_coverage, with_matched
from memory_service.longterm.near_duplicates import NearDuplicatePolicy, unit_rows
from memory_service.longterm.recording import RecordPlan, plan_record
from memory_service.longterm.store_hooks import LongTermHooks
from memory_service.longterm.store_values import (
    Candidates,
    NearestRequest,
    ReadView,
    ScopedCandidates,
    SearchRequest,
    StoredFacts,
    canonical_ids,
    has_evidence,
    is_hit,
    utc_times,
)
from memory_service.observe.foreground import FOREGROUND
from memory_service.observe.telemetry import sink, timed_stage
from memory_service.stores.tombstones import Tombstones

S = TypeVar("S", bound=StoredFacts)
log = logging.getLogger(__name__)


def _reassessed(old: Fact, new: Fact, now: datetime) -> datetime | None:
    """The update time of ``old`` rewritten as ``new``: now when its confidence changed."""
    if float(new.confidence) != float(old.confidence):
        return now
    return new.updated_at or old.updated_at


def _open(fact: Fact) -> bool:
    return fact.superseded_by is None and fact.valid_to is None


def _count_records(plan: RecordPlan) -> None:
    """Records by status for the metrics; created and superseding facts are new facts."""
    target = sink()
    counts: dict[str, int] = {}
    for result in plan.results:
        counts[result.status] = counts.get(result.status, 0) + 1
    for status, count in counts.items():
        target.records(status, count)
    target.facts_changed(counts.get("created", 0) + counts.get("superseded", 0))


def _redacted(redactor: Redactor, facts: Sequence[Fact]) -> tuple[list[Fact], list[dict[str, int]]]:
    """Each fact as it may be stored, and the values replaced in it by kind."""
    pairs = [redactor.fact(f) for f in facts]
    return [f for f, _ in pairs], [dict(c) for _, c in pairs]


class BaseLongTermMemory(LongTermHooks[S]):
    """``LongTermMemory`` done once; subclasses implement the hooks of ``LongTermHooks``."""

    backend_name: ClassVar[str] = "long-term"  # for messages
    usable_after_close: ClassVar[bool] = False  # True: close only drops what can be rebuilt
    rewrites_vectors: ClassVar[bool] = True  # an amended fact is written with its dense vector

    def __init__(
        self,
        embedder: Embedder,
        *,
        retrieval: RetrievalConfig | None = None,
        clock: Callable[[], datetime] = utcnow,
        expiry: ExpiryPolicy | None = None,
        confidence: ConfidenceDecay | None = None,
        track_access: bool = True,
        access_flush_s: float = 30.0,
        tombstones: Tombstones | None = None,
        redactor: Redactor | None = None,
        near_duplicates: NearDuplicatePolicy | None = None,
    ) -> None:
        self._embedder = embedder
        self.near_duplicates = near_duplicates or NearDuplicatePolicy()  # merged at record
        self.redactor = redactor or Redactor()  # every record and update passes it
        self.retrieval = retrieval or PRESETS["hybrid"]
        # how a threshold reads this embedder's cosines (config.retrieval.EmbedderTuning)
        self.evidence = Evidence(tuning_for(getattr(embedder, "name", "")))
        self._clock = clock
        self.expiry = expiry or ExpiryPolicy()
        self.confidence = confidence or ConfidenceDecay()
        self.access = AccessLog(
            self._flush_access, flush_every_s=access_flush_s, enabled=track_access
        )
        self._closed = False
        self._tombstones = tombstones  # None: no erase ever refuses a record (tests, tools)

    def _flush_access(self, ctx: RuntimeContext, marks: Mapping[str, AccessMark]) -> None:
        with self._write_lock(ctx):
            self._write_access(ctx, marks)

    def _view(self, fact_filter: FactFilter | None) -> ReadView:
        """The checked filter at this moment (``invalid_filter`` before anything is read)."""
        now = self._clock()
        if fact_filter is not None and not isinstance(fact_filter, FactFilter):
            raise InvalidInputError("filter must be a FactFilter", code="invalid_filter")
        checked = NO_FILTER if fact_filter is None else fact_filter.check(now)  # none: no check
        return ReadView(checked, now, self.expiry, self.confidence)

    # -- LongTermMemory -------------------------------------------------------------------

    def record(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> list[RecordResult]:
        """Each fact goes to its ``scope`` (None: ``ctx``'s); one write per scope, in scope
        order, each atomic. Results come back in the order of ``facts``."""
        now = self._clock()
        # redacted before the id and hash are derived (refuse: nothing written)
        facts, found = _redacted(self.redactor, facts)
        # all validated before anything is written; times made aware (naive = UTC)
        owners = [ctx if f.scope is None else ctx.in_scope(f.scope, f.agent_id) for f in facts]
        stamped = [utc_times(f.stamped(o, now)) for f, o in zip(facts, owners, strict=True)]
        if not stamped:
            return []
        self._check_open()
        with FOREGROUND.call():
            return self._record(ctx, owners, stamped, found, now)

    def _record(
        self,
        ctx: RuntimeContext,
        owners: Sequence[RuntimeContext],
        stamped: Sequence[Fact],
        found: Sequence[dict[str, int]],
        now: datetime,
    ) -> list[RecordResult]:
        """``record`` past its checks: the facts embedded and written, scope by scope."""
        vectors = self._embedder.embed([f.searchable_text for f in stamped])  # fails before writing
        dense_of: dict[str, np.ndarray] = {f.id: vectors[i] for i, f in enumerate(stamped)}
        self._check_not_erased(ctx)  # before the files backend makes the user's folder again
        groups: dict[RuntimeContext, list[int]] = {}
        for i, owner in enumerate(owners):
            groups.setdefault(owner, []).append(i)
        results: dict[int, RecordResult] = {}
        for owner, positions in groups.items():
            batch = [stamped[i] for i in positions]
            with self._write_lock(owner):
                self._check_not_erased(ctx)
                stored = self._read_for_record(owner, batch, now)
                near = self._near_duplicates(owner, batch, stored, dense_of, now)
                plan = plan_record(
                    batch, stored.by_id, stored.open_by_key, now, stored.raced, near=near
                )
                self._vectors_of_merged(plan, dense_of)
                self._write_record(owner, plan, stored, dense_of, now)
                if self._tombstones is not None and self._tombstones.refuses(ctx):
                    # an erase in another process began meanwhile (a Qdrant server has no lock
                    # shared with it): take the write back, so nothing of the user remains
                    self._delete(owner, canonical_ids([*plan.new, *plan.closed, *plan.amended]))
                    self._check_not_erased(ctx)
            _count_records(plan)
            if plan.merged_into:  # a merge is one more access of the fact it joined
                into = set(plan.merged_into.values())
                joined = [plan.amended.get(i) or plan.new[i] for i in into]
                self.access.note(ctx, joined, now)
            results.update(zip(positions, plan.results, strict=True))
        return [
            replace(results[i], redacted=found[i]) if found[i] else results[i]
            for i in range(len(stamped))
        ]

    def _near_duplicates(
        self,
        owner: RuntimeContext,
        batch: Sequence[Fact],
        stored: StoredFacts,
        dense_of: Mapping[str, np.ndarray],
        now: datetime,
    ) -> dict[str, Fact]:
        """For each fact of ``batch`` that is new to ``owner``, the fact it nearly duplicates
        (``near_duplicates``): the closest, by dense cosine at least the policy's, among the
        owner's active facts (the backend's dense leg, asked for the whole batch at once with
        the vectors the facts are stored with: ``_nearest``) and this batch's earlier facts,
        that the policy lets it merge into. Read under the write lock."""
        policy = self.near_duplicates
        if not policy.enabled:
            return {}
        view = ReadView(NO_FILTER.check(now), now, self.expiry, self.confidence)
        asked = [f for f in batch if f.id not in stored.by_id and policy.may_take(f, now)]
        if not asked:
            return {}
        request = NearestRequest(
            tuple(f.text for f in asked),
            tuple(dense_of[f.id] for f in asked),
            policy.depth,
            policy.cosine,
            view,
        )
        nearest = self._nearest(owner, request)  # the whole batch in one request where it can
        found = dict(zip([f.id for f in asked], nearest, strict=True))
        # the batch's own cosines, in one product: a later fact may repeat an earlier one
        within = unit_rows(np.stack([dense_of[f.id] for f in batch]))
        within = within @ within.T
        near: dict[str, Fact] = {}
        earlier: list[tuple[int, Fact]] = []  # this batch's facts that stay facts of their own
        for position, fact in enumerate(batch):
            if fact.id not in found:
                earlier.append((position, stored.by_id.get(fact.id, fact)))
                continue
            cands = found[fact.id]
            hits = [h for h in cands.legs.get("dense", ()) if h.score >= policy.cosine]
            loaded = cands.facts([h.id for h in hits]) if hits else {}
            scored = [(h.score, loaded[h.id]) for h in hits if h.id in loaded]
            scored += [
                (float(within[position, j]), other)
                for j, other in earlier
                if within[position, j] >= policy.cosine
            ]
            scored.sort(key=lambda pair: -pair[0])
            target = next((f for _, f in scored if policy.may_merge(f, fact, now)), None)
            if target is None:
                earlier.append((position, fact))
            else:
                near[fact.id] = target
        return near

    def _vectors_of_merged(self, plan: RecordPlan, dense_of: dict[str, np.ndarray]) -> None:
        """The dense vectors of the stored facts a merge rewrites, for a backend that writes a
        point whole (``rewrites_vectors``; the merge changed no text, so they are embedded
        again)."""
        if not self.rewrites_vectors:
            return
        missing = [f for fid, f in plan.amended.items() if fid not in dense_of]
        if missing:
            vectors = self._embedder.embed([f.searchable_text for f in missing])
            dense_of.update({f.id: vectors[i] for i, f in enumerate(missing)})

    def retrieve(
        self,
        ctx: RuntimeContext,
        query: str,
        top_k: int = 5,
        threshold: float = 0.0,
        *,
        mode: Mode = "hybrid",
        filter: FactFilter | None = None,  # noqa: A002 - the API's word for it
        scopes: Sequence[str] | None = None,
    ) -> list[Recall]:
        validate_query(query, top_k, threshold)
        legs = legs_for_mode(mode)
        view = self._view(filter)
        owners = ctx.visible_scopes(scopes)
        self._check_open()
        with timed_stage("retrieve"), FOREGROUND.call():
            recalls = self._retrieve(owners, query, top_k, threshold, mode, legs, view)
        self.access.note(ctx, [r.fact for r in recalls], view.now)  # batched, not written
        return recalls

    def _retrieve(
        self,
        owners: Sequence[RuntimeContext],
        query: str,
        top_k: int,
        threshold: float,
        mode: Mode,
        legs: tuple[Leg, ...],
        view: ReadView,
    ) -> list[Recall]:
        request = self._search_request(query, legs, self.retrieval.depth(top_k), threshold, view)
        terms = request.terms  # every scope's lexical leg and the fusion read them
        found = self._scoped_candidates(owners, request)
        leg_hits = {
            leg: [h for h in found.legs[leg] if is_hit(leg, h.score, threshold)]
            for leg in legs
            if leg in found.legs
        }
        if len(leg_hits) > 1:  # fusing several legs reads every candidate's fact
            leg_hits = found.readable(leg_hits)
        evidence = self.evidence
        if evidence.applies(float(threshold)) and len(leg_hits) > 1:
            if not evidence.dense_votes(query):
                leg_hits["dense"] = []  # the model does not read the question: no evidence
            leg_hits = with_matched(leg_hits, found.fact, self.retrieval, terms)
            if not evidence.answers(query, found.legs.get("dense", []), leg_hits, terms):
                return []
        elif not any(leg_hits.values()) or not has_evidence(leg_hits):
            return []
        with timed_stage("fusion"):
            if wants_coverage(legs, self.retrieval):
                leg_hits = with_matched(leg_hits, found.fact, self.retrieval, terms)
            fused = fuse_legs(
                mode,
                leg_hits,
                self.retrieval,
                top_k,
                now=view.moment,
                query_terms=terms,
                confidence_of=lambda fid: self.confidence.at(found.fact(fid), view.moment),
                scripts=evidence.scripts(query, found.text),
            )
        recalls = []
        facts = found.facts([h.id for h in fused])
        for h in fused:
            fact = facts.get(h.id)
            if fact is None:
                continue
            confidence = self.confidence.at(fact, view.moment)
            fact = self.confidence.flagged(fact, confidence)
            recalls.append(Recall(fact, h.score, h.ranks, h.scores, confidence))
        return recalls

    def _search_request(
        self, query: str, legs: tuple[Leg, ...], depth: int, threshold: float, view: ReadView
    ) -> SearchRequest:
        """What every scope's search of this recall reads: the query's terms, tokenized once,
        and its vector, embedded once as a query (``embed_query``) when the dense leg is
        asked (never cached across calls: that is the embedder's business)."""
        vector = self._embedder.embed_query([query])[0] if "dense" in legs else None
        return SearchRequest(
            query, tuple(query_terms(query)), vector, legs, depth, float(threshold), view
        )

    def _scoped_candidates(
        self, owners: Sequence[RuntimeContext], request: SearchRequest
    ) -> Candidates | ScopedCandidates:
        """Each leg's candidates over every scope in ``owners`` (narrowest first), merged by
        score (ties to 6 decimals: the narrower scope first) and cut to ``request.depth``. A
        wider scope's fact whose ``key`` an active fact of a narrower named scope holds is
        hidden (not deleted) before the cut, so the user's own value wins over the agent's,
        and the agent's over the tenant's."""
        found = self._candidates_each(owners, request)
        if not any(hits for cands in found[1:] for hits in cands.legs.values()):
            return found[0]  # no wider scope has a candidate: nothing to merge or hide
        parts: dict[str, Candidates] = {}
        hidden: set[str] = set()
        held: set[str] = set()  # keys held by the narrower scopes seen so far
        for owner, cands in zip(owners, found, strict=True):
            ids = {h.id for hits in cands.legs.values() for h in hits}
            parts.update(dict.fromkeys(ids, cands))
            if held:
                keyed = {i: k for i in ids if (k := cands.key(i)) is not None}
                hidden |= {i for i, k in keyed.items() if k in held}
            wider_keys = self._candidate_keys(found, owner, owners)
            if wider_keys:
                held |= self._open_keys(owner, wider_keys, request.view.now)
        merged = {
            leg: sorted(
                (h for cands in found for h in cands.legs.get(leg, ()) if h.id not in hidden),
                # stable: narrower scopes first on a tie, to 6 decimals as within a leg (an
                # engine's float32 score and an in-memory float64 one differ in the 7th)
                key=lambda h: -round(h.score, 6),
            )[: request.depth]
            for leg in request.legs
        }
        return ScopedCandidates(merged, parts)

    @staticmethod
    def _candidate_keys(
        found: Sequence[Candidates], owner: RuntimeContext, owners: Sequence[RuntimeContext]
    ) -> list[str]:
        """The keys of the wider scopes' candidates: the only ones a narrower fact can hide."""
        wider = found[list(owners).index(owner) + 1 :]
        keys = {
            k
            for cands in wider
            for hits in cands.legs.values()
            for h in hits
            if (k := cands.key(h.id)) is not None
        }
        return sorted(keys)

    def get(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]:
        wanted = canonical_ids(ids)
        if not wanted:
            return []
        self._check_open()
        found = self._get(ctx, wanted)
        facts = self.access.overlay(ctx, [found[i] for i in wanted if i in found])
        return self._marked(facts, self._clock())

    def _marked(self, facts: Sequence[Fact], moment: datetime) -> list[Fact]:
        """``facts`` with ``needs_verification`` as of ``moment``."""
        return [self.confidence.marked(f, moment) for f in facts]

    def list(
        self,
        ctx: RuntimeContext,
        *,
        limit: int = 100,
        cursor: str | None = None,
        include_inactive: bool = False,
        filter: FactFilter | None = None,  # noqa: A002 - the API's word for it
        scopes: Sequence[str] | None = None,
    ) -> Page[Fact]:
        """A page of the facts of ``scopes`` (default: ``ctx``'s own scope only) admitted by
        ``filter`` (see ``ReadView``), oldest first: listing hides nothing a narrower scope
        overrides (recall does). ``include_inactive``: every stored fact the metadata filter
        matches, superseded and expired ones too (export and maintenance); it does not
        combine with ``as_of``."""
        check_page(limit, cursor)  # refuse a bad limit or cursor before reading
        view = self._view(filter)
        if include_inactive and view.history:
            raise InvalidInputError(
                "as_of: not together with include_inactive", code="invalid_filter"
            )
        owners = [ctx] if scopes is None else ctx.visible_scopes(scopes)
        self._check_open()
        facts = [
            f for o in owners for f in self._list(o, include_inactive=include_inactive, view=view)
        ]
        if include_inactive:
            kept = [f for f in facts if view.matches(f)]
        else:
            kept = [f for f in facts if view.admits(f)]
        page = paginate(self.access.overlay(ctx, kept), limit, cursor)
        return replace(page, items=self._marked(page.items, view.moment))

    def update(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> int:
        """Rewrite the metadata of existing facts, matched by id: the text (so the id, hash and
        vectors) stays. Every fact is validated first; unknown ids are ignored. A new
        ``confidence`` is a new assessment: its decay starts again (``updated_at`` becomes
        now). Returns how many facts were rewritten."""
        wanted = {f.id: self.redactor.fact(f, text=False)[0].validate() for f in facts if f.id}
        ids = canonical_ids(list(wanted))
        if not ids:
            return 0
        self._check_open()
        with self._write_lock(ctx):
            stored = self._read_for_update(ctx, ids)
            now = self._clock()
            changes = {  # access metadata is the access log's: never rewritten from outside
                fid: utc_times(
                    replace(
                        wanted[fid],
                        text=old.text,
                        content_hash=old.content_hash,
                        access_count=old.access_count,
                        last_accessed_at=old.last_accessed_at,
                        phrasings=old.phrasings,  # record's, as the text is
                        updated_at=_reassessed(old, wanted[fid], now),
                        needs_verification=False,
                    )
                )
                for fid, old in stored.by_id.items()
                if fid in wanted
            }
            if changes:
                self._write_update(ctx, changes, stored)
        return len(changes)

    def confirm(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]:
        """Confirm facts as still true: each one's ``updated_at`` becomes now, so its
        confidence is its initial (stored) one again and it no longer needs verification.
        Returns the confirmed facts (unknown ids, another user's included, are left out;
        a superseded or closed fact cannot be confirmed: ``InactiveFactError``, nothing
        written)."""
        wanted = canonical_ids(ids)
        if not wanted:
            return []
        self._check_open()
        now = self._clock()
        with self._write_lock(ctx):
            self._check_not_erased(ctx)
            stored = self._read_for_update(ctx, wanted)
            closed = [i for i in wanted if i in stored.by_id and not _open(stored.by_id[i])]
            if closed:
                raise InactiveFactError(
                    f"memory {closed[0]!r} was superseded or closed: record what is true instead"
                )
            changes = {fid: replace(old, updated_at=now) for fid, old in stored.by_id.items()}
            if changes:
                self._write_update(ctx, changes, stored)
        return self.get(ctx, [i for i in wanted if i in changes])

    def delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        wanted = canonical_ids(ids)
        if not wanted:
            return 0
        self._check_open()
        self.access.forget(ctx, wanted)
        with self._write_lock(ctx):
            deleted = self._delete(ctx, wanted)
        sink().facts_changed(-deleted)
        return deleted

    def forget(self, ctx: RuntimeContext) -> int:
        """Every fact of ``ctx``'s user; the backend takes its write lock (and may skip it when
        the user has nothing stored)."""
        self._check_open()
        self.access.forget(ctx)
        forgotten = self._forget(ctx)
        sink().facts_changed(-forgotten)
        return forgotten

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many facts the user has stored, superseded and expired ones included."""
        self._check_open()
        view = ReadView(NO_FILTER, self._clock(), self.expiry)
        return sum(1 for _ in self._list(ctx, include_inactive=True, view=view))

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Erase every stored fact of the user (``pipeline/erasure.py``); how many there were."""
        return self.forget(ctx)

    def close(self) -> None:
        """Release the backend. A later call raises ``BackendUnavailableError``, unless the
        backend declares ``usable_after_close`` (it holds only what it can rebuild)."""
        if not self._closed:
            try:
                self.access.flush()  # the recalls counted since the last flush
            except Exception as exc:  # closing must not fail over a hint
                log.warning("access metadata not written on close: %s", exc)
            self._closed = not self.usable_after_close
            self._release()

    def _check_not_erased(self, ctx: RuntimeContext) -> None:
        if self._tombstones is not None:
            self._tombstones.check(ctx)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError(f"this {self.backend_name} long-term memory is closed")
