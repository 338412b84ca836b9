"""Where the LangGraph store's facts live: a long-term memory in this process, or a server.

The store needs six things of long-term memory, all addressed by one user of one tenant; a
``LocalFacts`` asks a ``LongTermMemory`` (a ``Services`` container's), a ``ClientFacts`` the
HTTP API through the shipped client (the tenant is the API key's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from memory_service.api.schemas.memories import FactOut, Hit
from memory_service.client import errors as client_errors
from memory_service.client.sync_client import MemoryClient
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, Recall
from memory_service.domain.limits import MAX_PAGE_SIZE, MIN_THRESHOLD
from memory_service.longterm.protocol import LongTermMemory
from memory_service.stores.user_data import ListsUsers


class UserFacts(Protocol):
    """One tenant's long-term memory, user by user."""

    def record(self, user: str, facts: Sequence[Fact]) -> list[str]:
        """Record ``facts``; the status of each (created, duplicate, superseded)."""
        ...

    def listing(
        self, user: str, *, tags_all: Sequence[str], key: str | None, inactive: bool = False
    ) -> list[Fact]:
        """Every fact of the user carrying ``tags_all`` (and ``key``), oldest first."""
        ...

    def recall(
        self, user: str, query: str, top_k: int, tags_all: Sequence[str]
    ) -> list[tuple[Fact, float | None]]:
        """The user's facts carrying ``tags_all`` most related to ``query``, in the fusion's
        order, each with its dense cosine (None: beyond the dense leg's candidates)."""
        ...

    def expire_at(self, user: str, fact: Fact, expires_at: datetime) -> None:
        """Move one fact's expiry."""
        ...

    def delete(self, user: str, ids: Sequence[str]) -> None: ...

    def users(self) -> list[str] | None:
        """The tenant's users, or None where the memory cannot list them."""
        ...


class LocalFacts:
    """A ``LongTermMemory`` in this process, for one tenant (user scope only)."""

    def __init__(self, memory: LongTermMemory, tenant_id: str) -> None:
        self.memory = memory
        self.tenant_id = tenant_id

    def _ctx(self, user: str) -> RuntimeContext:
        return RuntimeContext(self.tenant_id, user)

    def record(self, user: str, facts: Sequence[Fact]) -> list[str]:
        return [r.status for r in self.memory.record(self._ctx(user), facts)]

    def listing(
        self, user: str, *, tags_all: Sequence[str], key: str | None, inactive: bool = False
    ) -> list[Fact]:
        flt = FactFilter(tags_all=tuple(tags_all), key=key)
        facts: list[Fact] = []
        cursor: str | None = None
        while True:
            page = self.memory.list(
                self._ctx(user),
                limit=MAX_PAGE_SIZE,
                cursor=cursor,
                include_inactive=inactive,
                filter=flt,
                scopes=("user",),
            )
            facts.extend(page.items)
            cursor = page.next_cursor
            if not cursor:
                return facts

    def recall(
        self, user: str, query: str, top_k: int, tags_all: Sequence[str]
    ) -> list[tuple[Fact, float | None]]:
        hits: list[Recall] = self.memory.retrieve(
            self._ctx(user),
            query,
            top_k=top_k,
            threshold=MIN_THRESHOLD,
            filter=FactFilter(tags_all=tuple(tags_all)) if tags_all else None,
            scopes=("user",),
        )
        return [(hit.fact, hit.scores.get("dense")) for hit in hits]

    def expire_at(self, user: str, fact: Fact, expires_at: datetime) -> None:
        self.memory.update(self._ctx(user), [replace(fact, expires_at=expires_at)])

    def delete(self, user: str, ids: Sequence[str]) -> None:
        if ids:
            self.memory.delete(self._ctx(user), ids)

    def users(self) -> list[str] | None:
        if isinstance(self.memory, ListsUsers):
            return self.memory.users(self.tenant_id)
        return None


class ClientFacts:
    """A server's long-term memory through ``MemoryClient`` (tenant: the client's key)."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    def record(self, user: str, facts: Sequence[Fact]) -> list[str]:
        wire = [
            {
                "text": f.text,
                "key": f.key,
                "tags": list(f.tags),
                "expires_at": f.expires_at.isoformat() if f.expires_at else None,
            }
            for f in facts
        ]
        return [r.status for r in self.client.record(user, wire).results]

    def listing(
        self, user: str, *, tags_all: Sequence[str], key: str | None, inactive: bool = False
    ) -> list[Fact]:
        facts: list[Fact] = []
        cursor: str | None = None
        while True:
            page = self.client.list_memories(
                user,
                limit=MAX_PAGE_SIZE,
                cursor=cursor,
                include_inactive=inactive,
                scope=["user"],
                tags_all=list(tags_all),
                key=key,
            )
            facts.extend(_fact(f) for f in page.items)
            cursor = page.next_cursor
            if not cursor:
                return facts

    def recall(
        self, user: str, query: str, top_k: int, tags_all: Sequence[str]
    ) -> list[tuple[Fact, float | None]]:
        found = self.client.search(
            user,
            query,
            top_k=top_k,
            threshold=MIN_THRESHOLD,
            filter={"tags_all": list(tags_all)} if tags_all else None,
            scopes=["user"],
        )
        return [(_fact(hit), hit.scores.get("dense")) for hit in found.hits]

    def expire_at(self, user: str, fact: Fact, expires_at: datetime) -> None:
        try:
            self.client.update(user, fact.id, expires_at=expires_at)
        except client_errors.NotFoundError:  # deleted meanwhile: nothing to refresh
            return

    def delete(self, user: str, ids: Sequence[str]) -> None:
        for fid in ids:
            try:
                self.client.delete(user, fid)
            except client_errors.NotFoundError:
                continue

    def users(self) -> list[str] | None:
        """``GET /v1/users``: the key's tenant's users (a personal key's: its own alone)."""
        return [u.user_id for u in self.client.list_users().users]


def _fact(out: FactOut | Hit) -> Fact:
    """The fields of a fact (or a hit: no expiry shown) the store reads back."""
    return Fact(
        text=out.text,
        key=out.key,
        tags=tuple(out.tags),
        id=out.id,
        created_at=out.created_at,
        expires_at=getattr(out, "expires_at", None),
        valid_to=out.valid_to,
    )
