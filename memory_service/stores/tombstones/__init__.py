"""Tombstones: the writes of an erased user are refused, so nothing of them comes back.

Erasing a user (``pipeline/erasure.py``) writes the user's tombstone first (``erasing``),
removes the user's data store by store, each under the lock its writers take, and then marks
the tombstone ``erased`` with the time it finished. Every store that creates data for a user
calls ``check`` under that same lock before it writes (a store without a cross-process lock
checks again after writing and takes its write back):

- while an erase runs, every write for the user is refused;
- after it, a write whose work began before the erase finished (``RuntimeContext.started_at``:
  a chat call whose model answered late, a flush in flight) is refused;
- work that begins after it is served as for a new user.

A refused write raises ``UserErasedError`` (409 ``user_erased``). An erase that died half-way
leaves ``erasing``: the user's writes stay refused until the erase is run again. Both key a
tombstone by a digest of the user id (``user_digest``) and keep only the two times, none of
the user's data.

Two implementations: ``FilesTombstones`` (``files.py``, the single-node default) and
``PostgresTombstones`` (``postgres.py``, ``MEMORY_STATE__BACKEND=postgres``: one row per erased
user keyed by the same digest, so every replica refuses alike and the workspace holds none).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from psycopg import Connection

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import UserErasedError
from memory_service.domain.paths import WorkspacePaths

State = Literal["erasing", "erased"]


@dataclass(frozen=True, slots=True)
class Tombstone:
    state: State
    since: datetime  # when the erase began
    erased_at: datetime | None  # when it finished (state "erased")

    def refuses(self, started_at: datetime) -> bool:
        """Whether work that began at ``started_at`` may no longer write for the user."""
        return self.erased_at is None or started_at <= self.erased_at


def user_digest(ctx: RuntimeContext) -> str:
    """The digest of the user id that names a tombstone (its file, or its row)."""
    return WorkspacePaths.user_digest(ctx.user_id)


def erased_error(ctx: RuntimeContext) -> UserErasedError:
    return UserErasedError(
        f"user {ctx.user_id!r} was erased while this request ran: nothing was written"
    )


@runtime_checkable
class Tombstones(Protocol):
    """The tombstones of one workspace's erased users (see the module)."""

    def read(self, ctx: RuntimeContext, conn: Connection | None = None) -> Tombstone | None:
        """The user's tombstone; None when the user was never erased. ``conn``: a PostgreSQL
        writer's own transaction (the PostgreSQL store reads there; the files ignore it)."""
        ...

    def begin(self, ctx: RuntimeContext, now: datetime) -> None:
        """Refuse every write for the user from now on, until ``finish``."""
        ...

    def finish(self, ctx: RuntimeContext, began: datetime, now: datetime) -> None:
        """The erase is complete: refuse only work that began before ``now``."""
        ...

    def refuses(self, ctx: RuntimeContext, conn: Connection | None = None) -> bool: ...

    def check(self, ctx: RuntimeContext, conn: Connection | None = None) -> None:
        """``UserErasedError`` when a write for ``ctx`` must not happen (see the module)."""
        ...


class TombstoneChecks:
    """``refuses`` and ``check`` over an implementation's ``read``."""

    def read(self, ctx: RuntimeContext, conn: Connection | None = None) -> Tombstone | None:
        raise NotImplementedError

    def refuses(self, ctx: RuntimeContext, conn: Connection | None = None) -> bool:
        tombstone = self.read(ctx, conn)
        return tombstone is not None and tombstone.refuses(ctx.started_at)

    def check(self, ctx: RuntimeContext, conn: Connection | None = None) -> None:
        if self.refuses(ctx, conn):
            raise erased_error(ctx)
