"""The LongTermMemory protocol, and the optional capabilities a backend may declare.

``LongTermMemory`` is the narrow interface callers type against. What only some backends can
do is a separate ``runtime_checkable`` Protocol, tested with ``isinstance``: a caller never
looks a method up by name, and a backend that gains a capability only has to implement it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Protocol, runtime_checkable

from memory_service.config.retrieval import Mode
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, Recall, RecordResult
from memory_service.domain.pagination import Page


@runtime_checkable
class LongTermMemory(Protocol):
    """Stable facts about one user of one tenant, addressed by a ``RuntimeContext``.

    Every method reads and writes only ``ctx``'s tenant and user (or, for a context in the
    agent or tenant scope, that agent's or the tenant's shared memory). ``record`` sends each
    fact to its ``scope`` (default: ``ctx``'s). ``retrieve`` reads ``scopes`` (default: the
    user's, the agent's when ``ctx`` names one, the tenant's) and prefers the narrower scope on
    the same ``key``: user over agent over tenant; ``list`` reads ``ctx``'s own scope unless
    ``scopes`` names others. ``record`` is idempotent:
    the same text twice is one fact (``duplicate``; the second confirms it, and brings its
    ``source`` when the stored fact has none, and never replaces one). A fact with the
    ``key`` of an active fact supersedes it (``superseded``); superseded and expired facts
    are not recalled.
    ``filter`` narrows retrieve and list by metadata and asks about a past moment (``as_of``),
    inside each leg before top-k; a fact past its ``expires_at`` or (when on) its importance TTL is
    never returned by either, whether or not maintenance ran. ``get`` reads by id whatever
    is stored (superseded and expired facts too: erasure, import and audits read by id).
    ``retrieve``'s ``threshold`` is a floor on the dense cosine of query and memory: every
    ``dense`` hit reaches it; a ``hybrid`` recall answers only when some memory does (BM25
    then adds the memories sharing a term); ``bm25`` ignores it.
    ``update`` rewrites the metadata of existing facts by id (maintenance closes and merges
    facts with it); the text, and so the id, never changes. ``confirm`` marks facts as
    still true (``updated_at`` now: their confidence decays from there again); every read
    marks a fact whose decayed confidence is below the threshold ``needs_verification``.
    """

    def record(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> list[RecordResult]:
        """Store ``facts`` for ``ctx`` (each in its ``scope``; None: ``ctx``'s), all checked
        before anything is written. Returns one ``RecordResult`` per fact, in order: its id
        and what recording it did (``created``, ``duplicate``, ``superseded``, ``merged``)."""
        ...

    def retrieve(
        self,
        ctx: RuntimeContext,
        query: str,
        top_k: int = 5,
        threshold: float = 0.0,
        *,
        mode: Mode = "hybrid",
        filter: FactFilter | None = None,  # noqa: A002
        scopes: Sequence[str] | None = None,
    ) -> list[Recall]:
        """The at most ``top_k`` active facts of ``scopes`` (default: every scope ``ctx``
        sees) that best answer ``query`` in ``mode`` (``bm25``, ``dense``, ``hybrid``),
        among those ``filter`` admits, ``threshold`` the dense cosine floor. Returns them
        best first, each a ``Recall``: the fact, its score, its rank and score per leg, its
        decayed confidence; empty when nothing is evidence enough."""
        ...

    def get(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]:
        """The stored facts of ``ctx``'s scope among ``ids``, whatever their state, in the
        order of ``ids``; ids that name nothing stored are left out."""
        ...

    def list(
        self,
        ctx: RuntimeContext,
        *,
        limit: int = 100,
        cursor: str | None = None,
        include_inactive: bool = False,
        filter: FactFilter | None = None,  # noqa: A002
        scopes: Sequence[str] | None = None,
    ) -> Page[Fact]:
        """One page (``limit``, from ``cursor``) of the facts of ``scopes`` (default:
        ``ctx``'s own) that ``filter`` admits, oldest first; ``include_inactive``:
        superseded and expired facts too. Returns the page and the cursor of the next."""
        ...

    def update(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> int:
        """Rewrite the metadata of the stored facts named by ``facts``' ids (text and id
        stay). Returns how many were rewritten; unknown ids are ignored."""
        ...

    def confirm(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]:
        """Mark the facts ``ids`` as still true (their confidence decays from now). Returns
        the confirmed facts; a closed one refuses the whole call (``InactiveFactError``)."""
        ...

    def delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        """Remove the facts ``ids`` of ``ctx``'s scope. Returns how many were found."""
        ...

    def forget(self, ctx: RuntimeContext) -> int:
        """Remove every fact of ``ctx``'s user (or shared scope). Returns how many."""
        ...

    def close(self) -> None:
        """Release the backend; a later call raises ``BackendUnavailableError`` (unless it
        holds only what it can rebuild)."""
        ...


@runtime_checkable
class ListsAgents(Protocol):
    """A backend that can say which agents of a tenant have shared facts (export, the
    scheduler)."""

    def agents(self, tenant_id: str) -> list[str]: ...


@runtime_checkable
class SettlesStoredFacts(Protocol):
    """A backend whose stored form can disagree with what reading resolves (the files
    backend's fact files: repeated bullets, unmarked superseded facts; Qdrant's points: two open
    facts with one key after two writers raced) and can write it down (maintenance: the files
    backend in its decisions journal, its ledgers untouched).
    Returns counts by name (``exact_duplicates``, ``superseded``)."""

    def settle_stored_facts(self, ctx: RuntimeContext) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class Settlement:
    """What maintenance decided about one stored fact: ``decision`` (``superseded``,
    ``updated``: its metadata is now ``fact``'s; ``merged``, ``expired``: it leaves every read,
    ``fact`` None) and ``why``, in words."""

    fact_id: str
    decision: str
    why: str
    fact: Fact | None = None
    into: str | None = None  # merged: the fact that stays


@runtime_checkable
class JournalsDecisions(Protocol):
    """A backend whose stored record is append-only (the files backend's daily ledgers):
    maintenance's settlements are written beside it, and every read applies them, instead of
    an ``update`` or ``delete`` rewriting it. Returns how many were written."""

    def journal_decisions(self, ctx: RuntimeContext, settlements: Sequence[Settlement]) -> int: ...


@runtime_checkable
class ArchivesFactFiles(Protocol):
    """A backend that keeps dated files and can move those older than ``before`` out of
    its working set, never out of recall, list or get (a fact is kept until it is deleted,
    on every backend alike). Returns how many were moved."""

    def archive_fact_files(self, ctx: RuntimeContext, before: date) -> int: ...


@runtime_checkable
class CompactsDeleted(Protocol):
    """A backend whose files may keep deleted text for a while (Qdrant Edge's write-ahead
    log and segments): ``compact_deleted`` rewrites them without it, and says whether it
    had to. Each maintenance pass calls it once."""

    def compact_deleted(self) -> bool: ...
