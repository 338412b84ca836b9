"""The LongTermMemory protocol: one narrow interface, every backend behind it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from memory_service.config.retrieval import Mode
from memory_service.context import RuntimeContext
from memory_service.facts import Fact, Page, Recall, RecordResult


@runtime_checkable
class LongTermMemory(Protocol):
    """Stable facts about one user of one tenant, addressed by a ``RuntimeContext``.

    Every method reads and writes only ``ctx``'s tenant and user. ``record`` is idempotent:
    the same text twice is one fact (``duplicate``). A fact with the ``key`` of an active fact
    supersedes it (``superseded``); superseded and expired facts are not recalled.
    ``update`` rewrites the metadata of existing facts by id (maintenance closes and merges
    facts with it); the text, and so the id, never changes.
    """

    def record(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> list[RecordResult]: ...

    def retrieve(
        self,
        ctx: RuntimeContext,
        query: str,
        top_k: int = 5,
        threshold: float = 0.0,
        *,
        mode: Mode = "hybrid",
    ) -> list[Recall]: ...

    def get(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]: ...

    def list(
        self,
        ctx: RuntimeContext,
        *,
        limit: int = 100,
        cursor: str | None = None,
        include_inactive: bool = False,
    ) -> Page[Fact]: ...

    def update(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> int: ...

    def delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int: ...

    def forget(self, ctx: RuntimeContext) -> int: ...

    def close(self) -> None: ...
