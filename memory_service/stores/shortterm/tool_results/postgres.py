"""Evicted tool results in PostgreSQL, so a conversation recorded on one replica resolves its
references on every other, and no replica keeps a result on its disk.

One table, created if missing (``Database.ensure_schema("tool_results", MIGRATIONS)``; the
results a workspace still holds move here at a replica's start, ``logs_from_files``)::

    tool_results ((tenant_id, owner_id, session_id, result_id) primary key, body, created_at)

The model sees exactly what the files store shows it: the same preview, and a reference
``tool-results/<session>/<result_id>.txt`` checked by the same rules (``eviction``'s
``reference_parts``: the context's own session only, no absolute paths or ``..``), with the same
errors; an unknown reference is the same ``NotFoundError``. A result id is the tool call's id
when it is a safe name, made unique within the session (``-2``, ``-3``, ...) by the primary key,
so two replicas evicting the same call id at once get two results.

Evicting and erasing meet on the user's advisory lock, as session-log appends do (see
``session_logs/postgres.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError, InvalidInputError
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg
from memory_service.stores.database import Database
from memory_service.stores.shortterm.session_state import Clock, session_of
from memory_service.stores.shortterm.tool_results import (
    RESULT_SUFFIX,
    check_line_range,
    check_sizes,
    evicted_refs,
    line_range,
    needs_eviction,
    not_found,
    preview_of,
    reference_parts,
    result_id_base,
    result_ref,
)
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

log = logging.getLogger(__name__)

TABLE = "tool_results"
MIGRATIONS: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS tool_results (
        tenant_id   text        NOT NULL,
        owner_id    text        NOT NULL,
        session_id  text        NOT NULL,
        result_id   text        NOT NULL,
        body        text        NOT NULL,
        created_at  timestamptz NOT NULL,
        PRIMARY KEY (tenant_id, owner_id, session_id, result_id)
    )""",
)


def free_id(base: str, taken: set[str]) -> str:
    """``base``, or the first of ``base-2``, ``base-3``, ... not taken (as the files store)."""
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


class PostgresToolResultStore:
    """``ToolResultStore`` over one PostgreSQL table of ``database``."""

    def __init__(
        self,
        database: Database,
        workspace: Path,
        *,
        max_chars: int = 20_000,
        preview_chars: int = 2_000,
        clock: Clock = utcnow,
        tombstones: Tombstones | None = None,
    ) -> None:
        check_sizes(max_chars, preview_chars)
        self.max_chars = max_chars
        self.preview_chars = min(preview_chars, max_chars)
        self._db = database
        self._clock = clock
        self._tombstones = tombstones or FilesTombstones(
            Path(workspace)
        )  # nothing is written there
        database.ensure_schema(TABLE, MIGRATIONS)

    def _key(self, ctx: RuntimeContext) -> dict[str, Any]:
        return {"tenant": ctx.tenant_id, "owner": ctx.owner}

    def _lock_key(self, ctx: RuntimeContext) -> str:
        return f"{TABLE}:{self._db.schema or ''}:{ctx.tenant_id}/{ctx.owner}"

    def needs_eviction(self, message: Msg) -> bool:
        return needs_eviction(message, self.max_chars)

    def evict(self, ctx: RuntimeContext, message: Msg) -> Msg:
        """``message``, or its preview when it is a tool result over the size limit."""
        if not self.needs_eviction(message):
            return message
        base = result_id_base(message)
        params = {
            **self._key(ctx),
            "session": session_of(ctx),
            "base": base,
            "prefix": f"{base}-",
            "body": message.content,
            "at": self._clock(),
        }
        taken_query = (
            "SELECT result_id FROM tool_results WHERE tenant_id = %(tenant)s "
            "AND owner_id = %(owner)s AND session_id = %(session)s "
            "AND (result_id = %(base)s OR starts_with(result_id, %(prefix)s))"
        )
        insert = (
            "INSERT INTO tool_results (tenant_id, owner_id, session_id, result_id, body, "
            "created_at) VALUES (%(tenant)s, %(owner)s, %(session)s, %(id)s, %(body)s, %(at)s) "
            "ON CONFLICT DO NOTHING RETURNING result_id"
        )
        with self._db.connection() as conn:
            self._db.lock_key(conn, self._lock_key(ctx), shared=True)
            self._tombstones.check(ctx)  # inside the transaction: an erase waits for it
            taken = {row[0] for row in conn.execute(taken_query, params).fetchall()}
            while True:  # another replica may take the same id meanwhile: the next one then
                result_id = free_id(base, taken)
                if conn.execute(insert, {**params, "id": result_id}).fetchone():
                    break
                taken.add(result_id)
        return preview_of(message, result_ref(params["session"], result_id), self.preview_chars)

    def copy_in(self, ctx: RuntimeContext, bodies: Mapping[str, str]) -> int:
        """Add the results ``bodies`` (result id -> text) of ``ctx``'s session in one
        transaction; a result already stored under an id wins. How many were added."""
        query = (
            "INSERT INTO tool_results (tenant_id, owner_id, session_id, result_id, body, "
            "created_at) VALUES (%(tenant)s, %(owner)s, %(session)s, %(id)s, %(body)s, %(at)s) "
            "ON CONFLICT DO NOTHING"
        )
        params = {**self._key(ctx), "session": session_of(ctx), "at": self._clock()}
        added = 0
        with self._db.connection() as conn:
            self._db.lock_key(conn, self._lock_key(ctx), shared=True)
            self._tombstones.check(ctx)
            for result_id, body in bodies.items():
                added += conn.execute(query, {**params, "id": result_id, "body": body}).rowcount
        return added

    def read(
        self,
        ctx: RuntimeContext,
        ref: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        """The evicted text, or lines ``start_line..end_line`` of it (1-based, inclusive)."""
        session, name = reference_parts(ctx, ref)
        check_line_range(start_line, end_line)
        if not name.endswith(RESULT_SUFFIX):
            raise not_found(ref)
        query = (
            "SELECT body FROM tool_results WHERE tenant_id = %(tenant)s AND owner_id = "
            "%(owner)s AND session_id = %(session)s AND result_id = %(id)s"
        )
        params = {**self._key(ctx), "session": session, "id": name.removesuffix(RESULT_SUFFIX)}
        with self._db.connection() as conn:
            row = conn.execute(query, params).fetchone()
        if row is None:
            raise not_found(ref)
        return line_range(row[0], start_line, end_line)

    def remove_session(self, ctx: RuntimeContext) -> int:
        """Delete a session's evicted results; returns how many went."""
        query = (
            "DELETE FROM tool_results WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s "
            "AND session_id = %(session)s"
        )
        with self._db.connection() as conn:
            return conn.execute(query, {**self._key(ctx), "session": session_of(ctx)}).rowcount

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many evicted tool results the user has, in every session."""
        query = (
            "SELECT count(*) FROM tool_results WHERE tenant_id = %(tenant)s "
            "AND owner_id = %(owner)s"
        )
        with self._db.connection() as conn:
            row = conn.execute(query, self._key(ctx)).fetchone()
        return int(row[0]) if row else 0

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's evicted tool results, after the evictions in flight; how many."""
        query = "DELETE FROM tool_results WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s"
        with self._db.connection() as conn:
            self._db.lock_key(conn, self._lock_key(ctx), shared=False)
            return conn.execute(query, self._key(ctx)).rowcount

    def discard(self, ctx: RuntimeContext, messages: list[Msg]) -> None:
        """Delete the results of evicted messages that were never saved (a failed append).
        Called while another error is raised: an unreachable database is logged, not raised
        over it."""
        ids: list[str] = []
        session = None
        for ref in evicted_refs(messages):
            try:
                session, name = reference_parts(ctx, ref)
            except InvalidInputError:
                continue
            ids.append(name.removesuffix(RESULT_SUFFIX))
        if not ids:
            return
        query = (
            "DELETE FROM tool_results WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s "
            "AND session_id = %(session)s AND result_id = ANY(%(ids)s)"
        )
        try:
            with self._db.connection() as conn:
                conn.execute(query, {**self._key(ctx), "session": session, "ids": ids})
        except BackendUnavailableError as exc:
            log.warning("could not take back %d evicted tool results: %s", len(ids), exc)
