"""What every store holding users' data answers: how much of one user's it holds and how to
erase it (``UserData``, for an erase and its receipt), and, for a store whose users are not
workspace folders (Qdrant, PostgreSQL), who they are (``ListsUsers``, for maintenance's
sweep, export and dead-letter replay)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from memory_service.domain.context import RuntimeContext


@runtime_checkable
class UserData(Protocol):
    """A store that keeps data of users: it counts and erases one user's, under its own lock
    (the long-term backends too: the inspector's fact counts)."""

    def count_user(self, ctx: RuntimeContext) -> int: ...

    def erase_user(self, ctx: RuntimeContext) -> int: ...


@runtime_checkable
class ListsUsers(Protocol):
    """A store that names the tenants and users it holds data of, without workspace folders."""

    def tenants(self) -> list[str]:
        """Tenants with data here, sorted."""
        ...

    def users(self, tenant_id: str) -> list[str]:
        """Users of ``tenant_id`` with data here, sorted (scope owners left out)."""
        ...


def users_of(store: ListsUsers, tenant_id: str | None = None) -> list[RuntimeContext]:
    """Every (tenant, user) of ``store``, in order; only ``tenant_id``'s when given."""
    tenants = [tenant_id] if tenant_id is not None else store.tenants()
    return [RuntimeContext(t, user) for t in tenants for user in store.users(t)]
