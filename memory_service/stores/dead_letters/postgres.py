"""The flush's dead letters in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``): the same
records (``DeadLetterRecord``, one JSON line each, kept byte for byte as text) in one table,
so a letter a flush left on one replica is listed and replayed from any other.

The file's rules (``dead_letters.py``) hold, with rows for lines:

- **append** is one committed INSERT under the user's transaction lock, after the tombstone
  check, so an erase running meanwhile (which deletes under the same lock) leaves nothing;
- **read** returns every row of the user in the order written; a row that is not an entry
  of this user is counted as malformed and kept as it is;
- **rewrite** changes (or deletes) only the rows it replayed, each matched by its id *and*
  its exact text, in one transaction: rows appended meanwhile survive;
- the **replaying** guard is a session advisory lock (``Database.advisory_lock``, not
  waiting), so two replicas never replay one user's letters at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg

from memory_service.domain.context import RuntimeContext
from memory_service.observe.telemetry import sink
from memory_service.stores.database import Database
from memory_service.stores.dead_letters import Change, DeadLetter, DeadLetterRead, letter_of
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.tombstones import Tombstones

MIGRATIONS = [
    """CREATE TABLE IF NOT EXISTS memory_dead_letters (
        id bigserial PRIMARY KEY,
        tenant_id text NOT NULL,
        user_id text NOT NULL,
        pipeline text NOT NULL DEFAULT 'flush',
        line text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS memory_dead_letters_user "
    "ON memory_dead_letters (tenant_id, user_id, pipeline, id)",
]

WHERE = "memory_dead_letters (PostgreSQL)"  # what a flush result names as the letter's place
_USER = "tenant_id = %s AND user_id = %s AND pipeline = 'flush'"


def _lock_user(database: Database, conn: psycopg.Connection, owner: RuntimeContext) -> None:
    """The user's transaction lock, taken by every append, rewrite and erase."""
    database.lock_key(conn, f"dead-letters:{owner.tenant_id}:{owner.user_id}")


class PostgresDeadLetterBox:
    """One user's rows of ``memory_dead_letters`` (``DeadLetterBox``)."""

    relative = WHERE

    def __init__(self, database: Database, owner: RuntimeContext, tombstones: Tombstones) -> None:
        self.database = database
        self.owner = owner
        self.tombstones = tombstones

    def exists(self) -> bool:
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM memory_dead_letters WHERE {_USER})", self._who()
            ).fetchone()
        return bool(row and row[0])

    @contextmanager
    def replaying(self) -> Iterator[bool]:
        """Held while one replay of this user runs, on any replica; False when another has
        it. Appends stay free meanwhile (they take a different lock)."""
        key = f"dead-letters-replay:{self.owner.tenant_id}:{self.owner.user_id}"
        with self.database.advisory_lock(key, wait=False) as alone:
            yield alone

    def append(self, record: DeadLetterRecord, ctx: RuntimeContext | None = None) -> None:
        """Add one row, committed before this returns. With ``ctx`` (the flush's), refused
        with ``UserErasedError`` when the user was erased since its work began."""
        with self.database.connection() as conn:
            _lock_user(self.database, conn, self.owner)
            if ctx is not None:
                self.tombstones.check(ctx, conn)  # under the lock an erase takes too
            conn.execute(
                "INSERT INTO memory_dead_letters (tenant_id, user_id, line) VALUES (%s, %s, %s)",
                (*self._who(), record.to_json()),
            )
        sink().dead_letter("flush")

    def read(self, owner: RuntimeContext) -> DeadLetterRead:
        """The user's entries in the order written (each entry's index is its row id) and
        the count of rows that are not entries of this user."""
        with self.database.connection() as conn:
            rows = conn.execute(
                f"SELECT id, line FROM memory_dead_letters WHERE {_USER} ORDER BY id",
                (owner.tenant_id, owner.user_id),
            ).fetchall()
        letters: list[DeadLetter] = []
        malformed = 0
        for row_id, text in rows:
            try:
                letters.append(letter_of(int(row_id), text.encode("utf-8"), text, owner))
            except ValueError:
                malformed += 1
        return DeadLetterRead(letters, malformed)

    def rewrite(self, changes: Iterable[Change]) -> None:
        """Apply each (entry, new record or None to drop it) to the row it was read from,
        unless that row changed or went meanwhile (an erase): one transaction."""
        with self.database.connection() as conn:
            _lock_user(self.database, conn, self.owner)
            for letter, record in changes:
                old = letter.line.decode("utf-8")
                if record is None:
                    conn.execute(
                        "DELETE FROM memory_dead_letters WHERE id = %s AND line = %s",
                        (letter.index, old),
                    )
                else:
                    conn.execute(
                        "UPDATE memory_dead_letters SET line = %s WHERE id = %s AND line = %s",
                        (record.to_json(), letter.index, old),
                    )

    def remove_user(self, owner: RuntimeContext) -> int:
        """Delete every row of ``owner``, under the lock appends take; how many went."""
        with self.database.connection() as conn:
            _lock_user(self.database, conn, owner)
            cur = conn.execute(
                f"DELETE FROM memory_dead_letters WHERE {_USER}", (owner.tenant_id, owner.user_id)
            )
            return cur.rowcount

    def _who(self) -> tuple[str, str]:
        return self.owner.tenant_id, self.owner.user_id


class PostgresDeadLetterStore:
    """Every user's flush dead letters in PostgreSQL (``DeadLetterStore``), and who has any."""

    def __init__(self, database: Database, tombstones: Tombstones) -> None:
        self.database = database
        self.tombstones = tombstones
        database.ensure_schema("dead_letters", MIGRATIONS)

    def box(self, ctx: RuntimeContext) -> PostgresDeadLetterBox:
        return PostgresDeadLetterBox(
            self.database, RuntimeContext(ctx.tenant_id, ctx.user_id), self.tombstones
        )

    def count_user(self, ctx: RuntimeContext) -> int:
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT count(*) FROM memory_dead_letters WHERE {_USER}",
                (ctx.tenant_id, ctx.user_id),
            ).fetchone()
        return int(row[0]) if row else 0

    def erase_user(self, ctx: RuntimeContext) -> int:
        return self.box(ctx).remove_user(ctx)

    def tenants(self) -> list[str]:
        """Tenants with a letter (``ListsUsers``: the scheduler, replay)."""
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT tenant_id FROM memory_dead_letters ORDER BY 1"
            ).fetchall()
        return [row[0] for row in rows]

    def users(self, tenant_id: str) -> list[str]:
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT user_id FROM memory_dead_letters WHERE tenant_id = %s ORDER BY 1",
                (tenant_id,),
            ).fetchall()
        return [row[0] for row in rows]
