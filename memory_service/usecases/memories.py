"""Long-term memory's use cases: record, search, list, get, update, confirm, delete, forget.

A request is checked when it is made (the query, the filter, the page, the writer's right to
the scopes it writes), so the CLI refuses it before its model loads and every entry point
answers one mistake with one code; what needs a store (a source's session, a fact that is
not there) is checked when the use case runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memory_service.config.retrieval import Mode
from memory_service.domain.context import RuntimeContext, Scope
from memory_service.domain.errors import InvalidInputError, NotFoundError
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, Recall, RecordResult, utcnow
from memory_service.domain.pagination import Page, check_page
from memory_service.longterm.fusion import validate_query
from memory_service.pipeline.erasure import erase_facts, forget_user
from memory_service.stores.api_keys import SHARED_MEMORY_ROLES
from memory_service.usecases.base import Memories
from memory_service.usecases.provenance import check_source_sessions
from memory_service.usecases.rights import Writer, check_writable


def _checked_filter(fact_filter: FactFilter | None) -> FactFilter | None:
    """The filter with its times read (``invalid_filter`` otherwise); None when it narrows
    nothing."""
    if fact_filter is None or fact_filter.is_empty:
        return None
    return fact_filter.check(utcnow())


def _missing(fact_id: str) -> NotFoundError:
    return NotFoundError(f"no memory {fact_id!r} for this user")


def _missing_to_write(fact_id: str, ctx: RuntimeContext, writer: Writer) -> NotFoundError:
    """A write's miss; a writer held to the user's own memory is told where a shared fact
    (which search also returns) is changed instead."""
    if ctx.scope != "user" or writer.shared:
        return _missing(fact_id)
    return NotFoundError(
        f"no memory {fact_id!r} in this user's own memory; a shared (agent or tenant) memory "
        f"is changed with a {' or '.join(SHARED_MEMORY_ROLES)} key"
    )


# -- record ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """Facts to record in ``ctx``'s memory (each in its own ``scope``, else the context's).
    ``in_session``: the call is made inside ``ctx``'s session (a harness turn), so a source
    naming that session needs no stored state to prove it is the user's."""

    ctx: RuntimeContext
    facts: tuple[Fact, ...]
    writer: Writer
    in_session: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "facts", tuple(self.facts))
        check_writable(self.writer, [f.scope or self.ctx.scope for f in self.facts])


def record_facts(memories: Memories, request: RecordFacts) -> list[RecordResult]:
    """All or nothing: a source naming a session that is not the user's refuses the lot
    (``unknown_session``) before anything is written."""
    ctx, facts = request.ctx, list(request.facts)
    check_source_sessions(memories.shortterm, ctx, facts, in_session=request.in_session)
    return memories.longterm.record(ctx, facts)


# -- search and list ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchFacts:
    """A recall: the query (``queries.check_query``: ``invalid_query``, ``query_too_large``),
    how many and how close, which retrievers, which scopes (None: the user's, the agent's when
    ``ctx`` names one, the tenant's) and a filter (``invalid_filter``)."""

    ctx: RuntimeContext
    query: str
    top_k: int = 5
    threshold: float = 0.0
    mode: Mode = "hybrid"
    scopes: tuple[Scope, ...] | None = None
    filter: FactFilter | None = None

    def __post_init__(self) -> None:
        validate_query(self.query, self.top_k, self.threshold)
        if self.scopes is not None:
            object.__setattr__(self, "scopes", tuple(self.scopes))
        self.ctx.visible_scopes(self.scopes)  # the agent scope without an agent is refused
        object.__setattr__(self, "filter", _checked_filter(self.filter))


def search_facts(memories: Memories, request: SearchFacts) -> list[Recall]:
    return memories.longterm.retrieve(
        request.ctx,
        request.query,
        request.top_k,
        request.threshold,
        mode=request.mode,
        scopes=request.scopes,
        filter=request.filter,
    )


@dataclass(frozen=True, slots=True)
class ListFacts:
    """A page of ``ctx``'s facts (or the named scopes'), oldest first."""

    ctx: RuntimeContext
    limit: int = 100
    cursor: str | None = None
    include_inactive: bool = False
    scopes: tuple[Scope, ...] | None = None
    filter: FactFilter | None = None

    def __post_init__(self) -> None:
        check_page(self.limit, self.cursor)
        if self.scopes is not None:
            object.__setattr__(self, "scopes", tuple(self.scopes))
        object.__setattr__(self, "filter", _checked_filter(self.filter))


def list_facts(memories: Memories, request: ListFacts) -> Page[Fact]:
    return memories.longterm.list(
        request.ctx,
        limit=request.limit,
        cursor=request.cursor,
        include_inactive=request.include_inactive,
        scopes=request.scopes,
        filter=request.filter,
    )


# -- one fact ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetFact:
    """One fact by id, looked for in ``scopes`` in turn (None: the scopes recall reads by
    default, narrowest first; a fact's id names its owner, so at most one holds it)."""

    ctx: RuntimeContext
    fact_id: str
    scopes: tuple[Scope, ...] | None = None


def get_fact(memories: Memories, request: GetFact) -> Fact:
    """The fact, or ``NotFoundError`` (``not_found``)."""
    for owner in request.ctx.visible_scopes(request.scopes):
        found = memories.longterm.get(owner, [request.fact_id])
        if found:
            return found[0]
    raise _missing(request.fact_id)


UPDATABLE = frozenset({"kind", "importance", "confidence", "tags", "expires_at"})


@dataclass(frozen=True, slots=True)
class UpdateFact:
    """New metadata for one fact of ``ctx``'s memory: the fields named replace the stored
    ones; only ``expires_at`` may be null (it clears the expiry)."""

    ctx: RuntimeContext
    fact_id: str
    changes: Mapping[str, Any]
    writer: Writer

    def __post_init__(self) -> None:
        for name, value in self.changes.items():
            if name not in UPDATABLE:
                raise InvalidInputError(f"{name} cannot be changed", code="validation_error")
            if value is None and name != "expires_at":
                raise InvalidInputError(f"{name} cannot be null", code="validation_error")
        changes = dict(self.changes)
        if changes.get("tags") is not None:
            changes["tags"] = tuple(changes["tags"])
        object.__setattr__(self, "changes", changes)
        check_writable(self.writer, [self.ctx.scope])


def update_fact(memories: Memories, request: UpdateFact) -> Fact:
    """The fact as stored now, or ``NotFoundError`` (also when it was deleted meanwhile)."""
    memory, ctx, fact_id = memories.longterm, request.ctx, request.fact_id
    found = memory.get(ctx, [fact_id])
    if found:
        memory.update(ctx, [replace(found[0], **request.changes)])
        found = memory.get(ctx, [fact_id])
    if not found:
        raise _missing_to_write(fact_id, ctx, request.writer)
    return found[0]


@dataclass(frozen=True, slots=True)
class ConfirmFact:
    """Confirm one fact of ``ctx``'s scope as still true (a shared scope's needs a writer with
    the right to it)."""

    ctx: RuntimeContext
    fact_id: str
    writer: Writer

    def __post_init__(self) -> None:
        check_writable(self.writer, [self.ctx.scope])


def confirm_fact(memories: Memories, request: ConfirmFact) -> Fact:
    """The confirmed fact; ``NotFoundError``, or ``InactiveFactError`` for a closed fact."""
    confirmed = memories.longterm.confirm(request.ctx, [request.fact_id])
    if not confirmed:
        raise _missing_to_write(request.fact_id, request.ctx, request.writer)
    return confirmed[0]


@dataclass(frozen=True, slots=True)
class DeleteFact:
    """Delete one fact of ``ctx``'s scope, from the store and from the scope's MEMORY.md."""

    ctx: RuntimeContext
    fact_id: str
    writer: Writer

    def __post_init__(self) -> None:
        check_writable(self.writer, [self.ctx.scope])


def delete_fact(memories: Memories, request: DeleteFact) -> int:
    """How many facts went (1), or ``NotFoundError``."""
    ids: Sequence[str] = [request.fact_id]
    deleted = erase_facts(
        memories.longterm, memories.workspace, request.ctx, ids, docs=memories.docs
    )
    if not deleted:
        raise _missing_to_write(request.fact_id, request.ctx, request.writer)
    return deleted


def forget_facts(memories: Memories, ctx: RuntimeContext) -> int:
    """Every long-term fact of ``ctx``'s user, MEMORY.md and its snapshots included."""
    return forget_user(memories.longterm, memories.workspace, ctx, docs=memories.docs)
