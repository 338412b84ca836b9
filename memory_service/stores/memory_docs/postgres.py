"""MEMORY.md and its snapshots in PostgreSQL, for replicas that keep nothing on their disks.

Used when replica state lives in PostgreSQL (``Settings.state_in_postgres``) **and** the
long-term backend is Qdrant (``ReplicaStores.memory_docs``). With the files backend MEMORY.md
stays a file: it is that backend's human-readable memory, whose bullets it reads as facts.

Why PostgreSQL rather than Qdrant: these are documents, not vectors (a point per MEMORY.md
would carry a vector nobody searches); a rewrite replaces MEMORY.md and keeps its snapshot in
one transaction, so a reader on any replica sees the old document or the new one, never half;
and every other piece of replica state (sessions, logs, usage, keys, maintenance) is there
already, so the erase and the back-ups cover one more table, not one more system.

One table, ``memory_docs``: a row per document, keyed by tenant, scope, owner (the user id,
the agent id, or '' for the tenant's own memory) and name (``MEMORY.md`` or
``memory/archive/MEMORY.<stamp>.md``), with its body and when it was written. Writes and the
erase of one owner meet on a transaction-level advisory lock, under which a write checks the
user's tombstone, so nothing is written back for a user being erased.

Migration from files (a Qdrant deployment that kept MEMORY.md in its workspace before):
``import_files`` moves every MEMORY.md and snapshot the workspace still holds into the table
(a document already there wins) and deletes each owner's files once its rows are committed;
``ReplicaStores.memory_docs`` runs it at every start, so a replica's first start with
PostgreSQL state migrates it, and later starts find nothing to move.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import psycopg

from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.errors import UserErasedError
from memory_service.domain.paths import WorkspacePaths, id_folders
from memory_service.stores.database import Database
from memory_service.stores.memory_docs import (
    MEMORY_MD,
    SNAPSHOT_PREFIX,
    Snapshot,
    is_memory_doc,
    snapshot_name,
)
from memory_service.stores.memory_docs.files import FilesMemoryDocs
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

TABLE = "memory_docs"
MIGRATIONS: list[str] = [
    # version 1
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " tenant_id text NOT NULL,"
    " scope text NOT NULL,"
    " owner text NOT NULL,"
    " name text NOT NULL,"
    " body text NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (tenant_id, scope, owner, name))",
]

_INSERT_NEW = (
    f"INSERT INTO {TABLE} (tenant_id, scope, owner, name, body, created_at)"
    " VALUES (%s, %s, %s, %s, %s, now()) ON CONFLICT DO NOTHING"
)
_UPSERT = (
    f"INSERT INTO {TABLE} (tenant_id, scope, owner, name, body, created_at)"
    " VALUES (%s, %s, %s, %s, %s, now())"
    " ON CONFLICT (tenant_id, scope, owner, name)"
    " DO UPDATE SET body = EXCLUDED.body, created_at = EXCLUDED.created_at"
)
_OWNER = "tenant_id = %s AND scope = %s AND owner = %s"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def owner_key(ctx: RuntimeContext) -> tuple[str, str, str]:
    """(tenant, scope, owner) of the memory ``ctx`` addresses: an agent's and the tenant's
    documents are shared by their users, so the user id is not part of their key."""
    if ctx.scope == "agent":
        return ctx.tenant_id, "agent", str(ctx.agent_id)
    if ctx.scope == "tenant":
        return ctx.tenant_id, "tenant", ""
    return ctx.tenant_id, "user", ctx.user_id


def _storable(text: str) -> str:
    """``text`` as PostgreSQL's ``text`` holds it: a NUL (which it refuses) or a lone
    surrogate (which UTF-8 cannot encode) becomes U+FFFD, as reading a file does."""
    return _UNSTORABLE.sub("\ufffd", text)


class PostgresMemoryDocs:
    """``MemoryDocs`` over the ``memory_docs`` table of ``database``."""

    in_workspace = False

    def __init__(
        self, database: Database, workspace: Path, *, tombstones: Tombstones | None = None
    ) -> None:
        self.database = database
        self.tombstones = tombstones or FilesTombstones(Path(workspace))
        database.ensure_schema(TABLE, MIGRATIONS)

    def _lock(self, conn: psycopg.Connection, key: tuple[str, str, str]) -> None:
        """The owner's write lock, until the transaction ends (an erase takes it too)."""
        self.database.lock_key(conn, "\x1f".join((TABLE, *key)))

    def read(self, ctx: RuntimeContext) -> str:
        return self.read_named(ctx, MEMORY_MD) or ""

    def read_named(self, ctx: RuntimeContext, name: str) -> str | None:
        if not is_memory_doc(name):
            return None
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT body FROM {TABLE} WHERE {_OWNER} AND name = %s", (*owner_key(ctx), name)
            ).fetchone()
        return str(row[0]) if row else None

    def write(
        self,
        ctx: RuntimeContext,
        text: str,
        *,
        snapshot: Snapshot | None = None,
        check: bool = True,
    ) -> str | None:
        key = owner_key(ctx)
        kept: str | None = None
        with self.database.connection() as conn:  # one transaction: both rows, or neither
            self._lock(conn, key)
            if check:
                self.tombstones.check(ctx)  # under the lock the erase takes
            if snapshot is not None and snapshot.text:
                kept = snapshot_name(snapshot.stamp)
                conn.execute(_UPSERT, (*key, kept, _storable(snapshot.text)))
            conn.execute(_UPSERT, (*key, MEMORY_MD, _storable(text)))
        return kept

    def edit(self, ctx: RuntimeContext, change: Callable[[str], str | None]) -> None:
        key = owner_key(ctx)
        with self.database.connection() as conn:
            self._lock(conn, key)
            row = conn.execute(
                f"SELECT body FROM {TABLE} WHERE {_OWNER} AND name = %s", (*key, MEMORY_MD)
            ).fetchone()
            if row is None:
                return
            changed = change(str(row[0]))
            if changed is not None:
                conn.execute(_UPSERT, (*key, MEMORY_MD, _storable(changed)))

    def snapshots(self, ctx: RuntimeContext) -> list[str]:
        with self.database.connection() as conn:
            rows = conn.execute(
                f"SELECT name FROM {TABLE} WHERE {_OWNER} AND starts_with(name, %s) ORDER BY name",
                (*owner_key(ctx), SNAPSHOT_PREFIX),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def write_snapshot(self, ctx: RuntimeContext, snapshot: Snapshot) -> str:
        key, name = owner_key(ctx), snapshot_name(snapshot.stamp)
        with self.database.connection() as conn:
            self._lock(conn, key)
            self.tombstones.check(ctx)
            conn.execute(_UPSERT, (*key, name, _storable(snapshot.text)))
        return name

    def count_user(self, ctx: RuntimeContext) -> int:
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {TABLE} WHERE {_OWNER}", owner_key(ctx)
            ).fetchone()
        return int(row[0]) if row else 0

    def erase_user(self, ctx: RuntimeContext) -> int:
        key = owner_key(ctx)
        with self.database.connection() as conn:
            self._lock(conn, key)  # after a write in progress, before the next one
            deleted = conn.execute(f"DELETE FROM {TABLE} WHERE {_OWNER}", key)
            return deleted.rowcount

    def import_files(self, workspace: Path) -> int:
        """Move the MEMORY.md files and snapshots of ``workspace`` into the table (one
        transaction per owner; a document already stored wins) and delete them; an owner
        being erased is left to its erase. Returns how many documents were copied."""
        files = FilesMemoryDocs(workspace, tombstones=self.tombstones)
        copied = 0
        for ctx in file_owners(workspace):
            documents = [MEMORY_MD, *files.snapshots(ctx)]
            found = [(name, files.read_named(ctx, name)) for name in documents]
            stored = [(name, text) for name, text in found if text is not None]
            if not stored:
                continue
            key = owner_key(ctx)
            try:
                with self.database.connection() as conn:
                    self._lock(conn, key)
                    self.tombstones.check(ctx)
                    for name, text in stored:
                        copied += conn.execute(_INSERT_NEW, (*key, name, _storable(text))).rowcount
            except UserErasedError:
                continue
            files.erase_user(ctx)
        return copied


def file_owners(workspace: Path) -> list[RuntimeContext]:
    """Every owner with a folder in ``workspace``: users, agents, each tenant's own memory."""
    where = WorkspacePaths(Path(workspace))
    owners: list[RuntimeContext] = []
    for tenant in id_folders(where.tenants_dir):
        owners += [RuntimeContext(tenant, user) for user in id_folders(where.users_dir(tenant))]
        agents = id_folders(where.agents_dir(tenant))
        owners += [scope_context(tenant, "agent", agent) for agent in agents]
        if where.shared_dir(tenant).is_dir():
            owners.append(scope_context(tenant, "tenant"))
    return owners
