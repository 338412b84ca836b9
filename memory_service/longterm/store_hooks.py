"""The hooks a long-term backend implements: small reads and writes of its own storage, which
``BaseLongTermMemory`` (``base_store.py``) calls with checked input, under its rules. A search
arrives as one value built once (``store_values.SearchRequest``, ``NearestRequest``): the
query's terms and vector are in it, so a backend never calls back for them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Generic, TypeVar

import numpy as np

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.access import AccessMark
from memory_service.longterm.recording import RecordPlan
from memory_service.longterm.store_values import (
    Candidates,
    NearestRequest,
    ReadView,
    SearchRequest,
    StoredFacts,
)

S = TypeVar("S", bound=StoredFacts)


class LongTermHooks(ABC, Generic[S]):
    """What a backend implements; ``S`` is what its reads before a write return."""

    @abstractmethod
    def _write_lock(self, ctx: RuntimeContext) -> AbstractContextManager[Any]:
        """Serialises the user's writes: a record's read and write happen under it."""

    @abstractmethod
    def _read_for_record(self, ctx: RuntimeContext, stamped: Sequence[Fact], now: datetime) -> S:
        """The stored facts under the incoming ids, and the open facts under their keys."""

    @abstractmethod
    def _write_record(
        self,
        ctx: RuntimeContext,
        plan: RecordPlan,
        stored: S,
        dense_of: Mapping[str, np.ndarray],
        now: datetime,
    ) -> None:
        """Write ``plan.new`` (their vectors in ``dense_of``) and ``plan.closed``; remove the
        old copies of ``plan.revived``; rewrite ``plan.amended`` where it is stored (its source
        indexed anew). Durable when it returns."""

    @abstractmethod
    def _candidates(self, ctx: RuntimeContext, request: SearchRequest) -> Candidates:
        """``ctx``'s candidates for ``request`` (one scope of a recall): up to
        ``request.depth`` ranked hits per leg of ``request.legs`` among the facts
        ``request.view`` admits, chosen inside each leg before the cut to the depth (a
        filter never empties a leg that has matching facts further down). The lexical leg
        searches ``request.terms``, the dense leg ``request.vector``; never embed or tokenize
        again. The base keeps only hits (``is_hit``); a backend may use
        ``request.threshold`` to cut the dense leg early. Returns each leg's hits, best
        first, and how to read their facts."""

    def _candidates_each(
        self, owners: Sequence[RuntimeContext], request: SearchRequest
    ) -> list[Candidates]:
        """``_candidates`` of each of ``owners`` (a recall's visible scopes, narrowest first)
        for the same ``request``, in order. A backend that can ask for every owner at once
        (one engine request) overrides it; each owner's answer must be what ``_candidates``
        alone would give, except that a wider owner may leave out hits at or below
        ``store_values.merge_floors`` of the first (they cannot reach the merged cut)."""
        return [self._candidates(o, request) for o in owners]

    def _nearest(self, ctx: RuntimeContext, request: NearestRequest) -> list[Candidates]:
        """Per fact of ``request`` (in order), the dense leg's candidates among ``ctx``'s
        facts, searched with that fact's stored vector, as ``_candidates`` would give them:
        the nearest stored facts of each fact a record brings. A backend that can ask for
        every fact at once overrides it; this asks ``_candidates`` once per fact."""
        return [self._candidates(ctx, search) for search in request.searches()]

    @abstractmethod
    def _open_keys(self, ctx: RuntimeContext, keys: Sequence[str], now: datetime) -> set[str]:
        """Which of ``keys`` an active fact (open, not expired at ``now``) of ``ctx`` holds."""

    @abstractmethod
    def _get(self, ctx: RuntimeContext, ids: Sequence[str]) -> Mapping[str, Fact]:
        """The stored facts among ``ids`` (canonical ids), by id."""

    @abstractmethod
    def _list(
        self, ctx: RuntimeContext, *, include_inactive: bool, view: ReadView
    ) -> Iterable[Fact]:
        """The user's facts: at least those ``view`` admits (all of them when
        ``include_inactive``); the base applies ``view`` to what this returns."""

    @abstractmethod
    def _read_for_update(self, ctx: RuntimeContext, ids: Sequence[str]) -> S:
        """The stored facts among ``ids``, with what ``_write_update`` needs."""

    @abstractmethod
    def _write_update(self, ctx: RuntimeContext, changes: Mapping[str, Fact], stored: S) -> None:
        """Replace the stored facts named in ``changes`` (all found in ``stored``)."""

    @abstractmethod
    def _delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        """Remove the facts among ``ids`` (under the write lock); how many were found."""

    @abstractmethod
    def _forget(self, ctx: RuntimeContext) -> int:
        """Remove every fact of the user; how many there were."""

    @abstractmethod
    def _write_access(self, ctx: RuntimeContext, marks: Mapping[str, AccessMark]) -> None:
        """Add ``marks`` to the stored access metadata of the facts among them that still
        exist (under the write lock; one batch per user)."""

    def _release(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds (called once, by ``close``)."""
