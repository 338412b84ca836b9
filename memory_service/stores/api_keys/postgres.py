"""The API keys in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``): one table every replica
reads, so a key added or revoked on any machine counts on all of them within seconds.

Same interface and rules as the keys file (``files.FilesKeyStore``): only SHA-256 digests are
stored, never a key; ``add`` shows the key once; ``revoke`` takes the key or a unique prefix
of its fingerprint; ``entries`` lists the keys in force. The tables::

    api_keys          digest (32 bytes, primary key), tenant, role, created_at (ISO-8601, as
                      the file keeps it), revoked_at (a revoked key stays, so re-importing an
                      old keys file cannot bring it back), position (insertion order),
                      user_id (a personal key's one user; null for every other role). A row
                      an older version wrote says ``user`` for the application role, and is
                      read so; rows are never rewritten, so an older replica still reads them
    api_keys_version  one row: locked by every change, bumped in its transaction if it
                      changed something

A replica follows the keys through ``version()`` (one indexed row: cheap to ask every few
seconds) and ``load()`` when it moved. A counter, not ``max(updated_at)``: a transaction's
timestamp is its start, so a change committing after a later-started one could hide behind
it; the counter's row lock also serialises writers, as the file's lock does.

``migrate`` imports a keys file once (plaintext entries as their digests): a deployment
moving to replicas keeps its keys. A key already in the table, revoked or not, is left as is.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from memory_service.stores.api_keys import (
    KEY_PREFIX,
    ROLE_ALIASES,
    ROLES,
    KeyEntry,
    find_entry,
    mint,
    role_of,
)
from memory_service.stores.api_keys.files import read_entries
from memory_service.stores.database import Database

STORE_NAME = "api_keys"
_ROLES_SQL = ", ".join(f"'{r}'" for r in (*ROLES, *ROLE_ALIASES))
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS api_keys (
        digest bytea PRIMARY KEY CHECK (octet_length(digest) = 32),
        tenant text NOT NULL,
        role text NOT NULL CHECK (role IN ('user', 'curator', 'admin')),
        created_at text,
        revoked_at timestamptz,
        position bigint GENERATED ALWAYS AS IDENTITY
    );
    CREATE TABLE IF NOT EXISTS api_keys_version (
        id int PRIMARY KEY CHECK (id = 1),
        version bigint NOT NULL
    );
    INSERT INTO api_keys_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
    """,
    f"""
    ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_role_check;
    ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ({_ROLES_SQL}));
    ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS user_id text;
    ALTER TABLE api_keys ADD CONSTRAINT api_keys_personal_user
        CHECK ((role = 'personal') = (user_id IS NOT NULL));
    """,
)
_ACTIVE = (
    "SELECT digest, tenant, role, created_at, user_id FROM api_keys "
    "WHERE revoked_at IS NULL ORDER BY position"
)
_INSERT = (
    "INSERT INTO api_keys (digest, tenant, role, created_at, user_id) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (digest) DO NOTHING"
)


def _entry(row: tuple) -> KeyEntry:
    digest, tenant, role, created_at, user_id = row
    return KeyEntry(bytes(digest), tenant, role_of(role), created_at, user=user_id)


class PostgresKeyStore:
    """``KeyStore``'s changes on the shared tables; ``keys_file`` is what ``migrate`` imports.
    Creates the tables if missing (``Database.ensure_schema``)."""

    def __init__(self, database: Database, *, keys_file: Path | None = None) -> None:
        self.database = database
        self.keys_file = keys_file
        database.ensure_schema(STORE_NAME, MIGRATIONS)

    @property
    def where(self) -> str:
        """Where the keys live, for messages (never the password)."""
        schema = f", schema {self.database.schema}" if self.database.schema else ""
        return f"PostgreSQL ({self.database.where}{schema})"

    def version(self) -> int:
        """The counter every change bumps: a replica reloads when it moved."""
        with self.database.connection() as conn:
            row = conn.execute("SELECT version FROM api_keys_version WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    def load(self) -> tuple[int, list[KeyEntry]]:
        """The version, then the keys in force: keys at least as new as the version (a
        change between the two reads is reloaded at the next check)."""
        with self.database.connection() as conn:
            row = conn.execute("SELECT version FROM api_keys_version WHERE id = 1").fetchone()
            entries = [_entry(r) for r in conn.execute(_ACTIVE).fetchall()]
        return (int(row[0]) if row else 0), entries

    def entries(self) -> list[KeyEntry]:
        return self.load()[1]

    def add(
        self,
        tenant: str,
        role: str = "application",
        *,
        prefix: str = KEY_PREFIX,
        user: str | None = None,
    ) -> str:
        key, entry = mint(tenant, role, prefix, user=user)
        with self.database.connection() as conn:
            self._lock(conn)
            self._insert(conn, [entry])
        return key

    def add_if_empty(self, tenant: str, role: str, *, prefix: str) -> str | None:
        """``add`` only when the table has never held a key (revoked ones count): the
        development key of a first start, minted once even when replicas start together."""
        key, entry = mint(tenant, role, prefix)
        with self.database.connection() as conn:
            self._lock(conn)
            if conn.execute("SELECT EXISTS (SELECT 1 FROM api_keys)").fetchone()[0]:
                return None  # nothing changed: the replicas need not reload
            self._insert(conn, [entry])
        return key

    def is_empty(self) -> bool:
        """Whether the table has never held a key (revoked ones count)."""
        with self.database.connection() as conn:
            return not conn.execute("SELECT EXISTS (SELECT 1 FROM api_keys)").fetchone()[0]

    def revoke(self, key_or_fingerprint: str) -> KeyEntry:
        """Revoke the key given itself, or by a prefix of its fingerprint (unique)."""
        with self.database.connection() as conn:
            self._lock(conn)
            active = [_entry(r) for r in conn.execute(_ACTIVE).fetchall()]
            match = find_entry(active, key_or_fingerprint, self.where)
            conn.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE digest = %s", (match.digest,)
            )
            self._bump(conn)
        return match

    def migrate(self) -> int:
        """Import ``keys_file`` (every key as its digest); returns how many were new here.
        A bad or missing file is a ``ConfigurationError`` and imports nothing."""
        if self.keys_file is None:
            return 0
        entries, _ = read_entries(self.keys_file)
        with self.database.connection() as conn:
            self._lock(conn)
            return self._insert(conn, entries)

    def _lock(self, conn: psycopg.Connection) -> None:
        """Serialise changes (as the file's lock does): the version row, locked until the
        transaction ends."""
        conn.execute("SELECT version FROM api_keys_version WHERE id = 1 FOR UPDATE")

    def _bump(self, conn: psycopg.Connection) -> None:
        """Tell the replicas, in the change's own transaction: they reload at their next look."""
        conn.execute("UPDATE api_keys_version SET version = version + 1 WHERE id = 1")

    def _insert(self, conn: psycopg.Connection, entries: list[KeyEntry]) -> int:
        """Store the entries not here yet; returns how many were; bumps the version if any."""
        added = 0
        for e in entries:
            row = (e.digest, e.tenant, e.role, e.created_at, e.user)
            cursor = conn.execute(_INSERT, row)
            added += cursor.rowcount
        if added:
            self._bump(conn)
        return added
