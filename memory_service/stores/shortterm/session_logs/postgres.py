"""Session logs in PostgreSQL, so replicas behind a load balancer share them (and
``session_search``) and keep none of them on their disks.

One table, created if missing (``Database.ensure_schema("session_log", MIGRATIONS)``; a later
change is appended to ``MIGRATIONS`` as the next version; the logs a workspace still holds
move here at a replica's start, ``logs_from_files``)::

    session_log (id bigserial, tenant_id, owner_id, session_id, seq, role,
                 message jsonb, body text, terms tsvector, created_at timestamptz)

One row per logged message; ``id`` keeps the order of appends, ``owner_id`` is
``RuntimeContext.owner`` (the user id for a user's sessions), as the files log keys its folder
by ``OwnerPaths.of``. ``message`` is ``Msg.to_dict`` (what ``read`` gives back), ``body`` its
text.

``terms`` is what ``search`` matches, under a GIN index: the project's own tokenizer
(``indexing.tokenize``: NFKC and case folding, English Snowball stems, English stop words
dropped, accents folded beside the word as written, CJK runs as characters and bigrams),
written as a tsvector with positions, beside the tokenizer version that made it
(``terms_version``; a replica's start makes again the terms an older version made). In
PostgreSQL's terms it is the ``simple`` configuration over lexemes the service made itself.
Neither built-in configuration would do: ``english`` stems with Porter rather than Snowball
and drops another stop list, ``simple`` does not stem, and neither splits CJK text, so the
same query would find other messages here than in the files log. Hits are scored as the files
log scores them (the share of the query's terms matched, +0.5 when the text holds the query
literally) and ordered by that score, then ``ts_rank`` (more occurrences, in a shorter
message), then the newest. A hit must share a term with the query: a literal match inside a
word ("Lui" in "Luigi's"), which the files log also finds, needs a scan the index cannot
serve, so it is found only when the query has no terms at all (stop words, punctuation).

Appends and erasing meet on a transaction-level advisory lock per user, as the PostgreSQL state
store's saves do: an append takes it shared and checks the user's tombstone inside its
transaction, ``erase_user`` takes it exclusively, so no append begun before an erase commits
after it. An append of several messages is one transaction: all of them or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from indexing.tokenize import TOKENIZER_VERSION, tokenize
from memory_service.domain.context import RuntimeContext, validate_id
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg
from memory_service.stores.database import Database
from memory_service.stores.shortterm.session_logs import (
    DEFAULT_RETENTION_DAYS,
    LogEntry,
    SessionHit,
    retention_cutoff,
    snippet,
)
from memory_service.stores.shortterm.session_state import Clock, session_of
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

TABLE = "session_log"
MIGRATIONS: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS session_log (
        id          bigserial   PRIMARY KEY,
        tenant_id   text        NOT NULL,
        owner_id    text        NOT NULL,
        session_id  text        NOT NULL,
        seq         integer,
        role        text        NOT NULL,
        message     jsonb       NOT NULL,
        body        text        NOT NULL,
        terms       tsvector    NOT NULL,
        created_at  timestamptz NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS session_log_session "
    "ON session_log (tenant_id, owner_id, session_id, id)",
    "CREATE INDEX IF NOT EXISTS session_log_terms ON session_log USING gin (terms)",
    # the tokenizer version that made ``terms``: rows from before it was recorded (and any a
    # writer that does not say inserts) are version 1's
    "ALTER TABLE session_log ADD COLUMN IF NOT EXISTS terms_version integer NOT NULL DEFAULT 1",
    "CREATE INDEX IF NOT EXISTS session_log_terms_version ON session_log (terms_version)",
)
RETERM_BATCH = 1000

# What PostgreSQL lets a tsvector hold: lexemes under 2 KiB, 256 positions each, positions up
# to 16383, 1 MiB of lexemes in all. A term past these limits is left out of the index (a
# 300-character token is nobody's query); the message itself is kept whole.
MAX_TERM_BYTES = 255
MAX_TERMS_BYTES = 512 * 1024
MAX_POSITIONS = 256
MAX_POSITION = 16383


def quote_lexeme(term: str) -> str:
    """``term`` as a quoted lexeme of tsvector / tsquery input (quotes and backslashes
    doubled), so no character of it is read as syntax."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def terms_vector(text: str) -> str:
    """The tsvector input of ``text``'s terms, with positions, within PostgreSQL's limits."""
    positions: dict[str, list[int]] = {}
    size = 0
    for position, term in enumerate(tokenize(text), start=1):
        found = positions.get(term)
        if found is not None:
            if len(found) < MAX_POSITIONS and position <= MAX_POSITION:
                found.append(position)
            continue
        width = len(term.encode("utf-8"))
        if width > MAX_TERM_BYTES or size + width > MAX_TERMS_BYTES:
            continue
        size += width
        positions[term] = [min(position, MAX_POSITION)]
    return " ".join(
        f"{quote_lexeme(term)}:{','.join(map(str, found))}" for term, found in positions.items()
    )


def any_term(terms: Sequence[str]) -> str:
    """The tsquery input matching a message that holds any of ``terms``."""
    return " | ".join(quote_lexeme(term) for term in terms)


def _utc(at: datetime) -> datetime:
    return at.astimezone(UTC)


class PostgresSessionLogStore:
    """``SessionLogStore`` over one PostgreSQL table of ``database``."""

    def __init__(
        self,
        database: Database,
        workspace: Path,
        *,
        clock: Clock = utcnow,
        tombstones: Tombstones | None = None,
    ) -> None:
        self._db = database
        self._clock = clock
        self._tombstones = tombstones or FilesTombstones(
            Path(workspace)
        )  # nothing is written there
        database.ensure_schema(TABLE, MIGRATIONS)
        self.retermed = self._reterm()

    def _reterm(self) -> int:
        """Make again, with this tokenizer, the ``terms`` of every message an older one made
        (``terms_version`` below ``TOKENIZER_VERSION``), a batch per transaction; how many.
        Nothing to do is one indexed read. Replicas starting at once write the same terms."""
        select = "SELECT id, body FROM session_log WHERE terms_version < %s ORDER BY id LIMIT %s"
        update = "UPDATE session_log SET terms = %s::tsvector, terms_version = %s WHERE id = %s"
        total = 0
        while True:
            with self._db.connection() as conn:
                rows = conn.execute(select, (TOKENIZER_VERSION, RETERM_BATCH)).fetchall()
                if not rows:
                    return total
                with conn.cursor() as cur:
                    cur.executemany(
                        update, [(terms_vector(body), TOKENIZER_VERSION, i) for i, body in rows]
                    )
            total += len(rows)

    def _key(self, ctx: RuntimeContext) -> dict[str, Any]:
        return {"tenant": ctx.tenant_id, "owner": ctx.owner}

    def _lock_key(self, ctx: RuntimeContext) -> str:
        return f"{TABLE}:{self._db.schema or ''}:{ctx.tenant_id}/{ctx.owner}"

    def append(self, ctx: RuntimeContext, messages: Sequence[Msg]) -> None:
        """Append ``messages`` to the session's log in one transaction; durable when this
        returns."""
        if not messages:
            return
        at = self._clock()
        key = {**self._key(ctx), "session": session_of(ctx), "at": at}
        key["version"] = TOKENIZER_VERSION
        rows = [
            {
                **key,
                "seq": m.seq,
                "role": m.role,
                "message": Jsonb(m.to_dict()),
                "body": m.content,
                "terms": terms_vector(m.content),
            }
            for m in messages
        ]
        query = (
            "INSERT INTO session_log (tenant_id, owner_id, session_id, seq, role, message, "
            "body, terms, terms_version, created_at) VALUES (%(tenant)s, %(owner)s, %(session)s, "
            "%(seq)s, %(role)s, %(message)s, %(body)s, %(terms)s::tsvector, %(version)s, %(at)s)"
        )
        with self._db.connection() as conn:
            self._db.lock_key(conn, self._lock_key(ctx), shared=True)
            self._tombstones.check(ctx)  # inside the transaction: an erase waits for it
            with conn.cursor() as cur:
                cur.executemany(query, rows)

    def copy_in(self, ctx: RuntimeContext, entries: Sequence[LogEntry]) -> int:
        """Add logged ``entries`` of ``ctx``'s session with their own times, in one
        transaction, skipping those already here (a move from files cut short, run again);
        how many were added."""
        key = {**self._key(ctx), "session": session_of(ctx), "version": TOKENIZER_VERSION}
        query = (
            "INSERT INTO session_log (tenant_id, owner_id, session_id, seq, role, message, "
            "body, terms, terms_version, created_at) SELECT %(tenant)s, %(owner)s, %(session)s, "
            "%(seq)s, %(role)s, %(message)s, %(body)s, %(terms)s::tsvector, %(version)s, %(at)s "
            "WHERE NOT EXISTS "
            "(SELECT 1 FROM session_log WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s "
            "AND session_id = %(session)s AND created_at = %(at)s AND message = %(message)s)"
        )
        added = 0
        with self._db.connection() as conn:
            self._db.lock_key(conn, self._lock_key(ctx), shared=True)
            self._tombstones.check(ctx)
            for entry in entries:
                m = entry.message
                row = {**key, "seq": m.seq, "role": m.role, "message": Jsonb(m.to_dict())}
                row |= {"body": m.content, "terms": terms_vector(m.content), "at": entry.at}
                added += conn.execute(query, row).rowcount
        return added

    def read(self, ctx: RuntimeContext, session_id: str | None = None) -> list[LogEntry]:
        """A session's logged messages, oldest first (a row that is no message is skipped);
        an id that is no session id is ``InvalidIdError``, as the files log refuses it."""
        sid = validate_id(session_id or session_of(ctx), "session_id")
        query = (
            "SELECT created_at, message FROM session_log WHERE tenant_id = %(tenant)s "
            "AND owner_id = %(owner)s AND session_id = %(session)s ORDER BY id"
        )
        with self._db.connection() as conn:
            rows = conn.execute(query, {**self._key(ctx), "session": sid}).fetchall()
        entries = []
        for at, message in rows:
            try:
                entries.append(LogEntry(sid, _utc(at), Msg.from_dict(message)))
            except (ValueError, KeyError, TypeError):
                continue  # edited by hand into something else: skip, as the files log does
        return entries

    def sessions(self, ctx: RuntimeContext) -> list[str]:
        """Session ids with a log, in the order the files log lists them."""
        query = (
            "SELECT DISTINCT session_id FROM session_log "
            "WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s"
        )
        with self._db.connection() as conn:
            rows = conn.execute(query, self._key(ctx)).fetchall()
        return sorted(row[0] for row in rows)  # code-point order, not the database's collation

    def search(
        self,
        ctx: RuntimeContext,
        query: str,
        *,
        limit: int = 10,
        session_id: str | None = None,
    ) -> list[SessionHit]:
        """Past messages of the user's sessions that share terms with ``query``, best first
        (see the module docstring)."""
        if session_id is not None:
            validate_id(session_id, "session_id")  # refused as the files log refuses it
        phrase = query.casefold().strip()
        if not phrase or limit < 1:
            return []
        terms = sorted(set(tokenize(query)))
        params: dict[str, Any] = {
            **self._key(ctx),
            "phrase": query.strip(),
            "limit": limit,
            "session": session_id,
        }
        literal = "strpos(lower(body), lower(%(phrase)s)) > 0"
        where = "tenant_id = %(tenant)s AND owner_id = %(owner)s"
        if session_id is not None:
            where += " AND session_id = %(session)s"
        if terms:
            params |= {"terms": terms, "query": any_term(terms), "n": len(terms)}
            score = (
                "(length(terms) - length(ts_delete(terms, %(terms)s::text[])))::float8 / %(n)s"
                f" + CASE WHEN {literal} THEN 0.5 ELSE 0 END"
            )
            rank = "ts_rank(terms, %(query)s::tsquery, 1)"
            where += " AND terms @@ %(query)s::tsquery"
        else:  # no term to look up: the literal text, over this user's messages only
            score, rank = "0.5", "0"
            where += f" AND {literal}"
        statement = (
            f"SELECT session_id, seq, created_at, role, body, round(({score})::numeric, 4) AS "
            f"score, {rank} AS rank, id FROM session_log WHERE {where} "
            "ORDER BY score DESC, rank DESC, created_at DESC, seq DESC NULLS LAST, id DESC "
            "LIMIT %(limit)s"
        )
        with self._db.connection() as conn:
            rows = conn.execute(statement, params).fetchall()
        found = set(terms)
        return [
            SessionHit(sid, seq, _utc(at), role, snippet(body, phrase, found), float(score))
            for sid, seq, at, role, body, score, _rank, _id in rows
        ]

    def tenants(self) -> list[str]:
        """Tenants with a logged message: with no user folders on disk, the scheduler learns
        from here whose logs the retention step must visit."""
        with self._db.connection() as conn:
            rows = conn.execute("SELECT DISTINCT tenant_id FROM session_log").fetchall()
        return sorted(row[0] for row in rows)

    def users(self, tenant_id: str) -> list[str]:
        """Users of ``tenant_id`` with a session log (``ListsUsers``' shape; scope owners,
        which no user id can equal, are left out)."""
        query = (
            "SELECT DISTINCT owner_id FROM session_log WHERE tenant_id = %s "
            "AND left(owner_id, 1) <> chr(30)"
        )
        with self._db.connection() as conn:
            rows = conn.execute(query, (tenant_id,)).fetchall()
        return sorted(row[0] for row in rows)

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many session logs the user has."""
        query = (
            "SELECT count(DISTINCT session_id) FROM session_log "
            "WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s"
        )
        with self._db.connection() as conn:
            row = conn.execute(query, self._key(ctx)).fetchone()
        return int(row[0]) if row else 0

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete every session log of the user, after the appends in flight; how many logs
        there were."""
        query = (
            "WITH gone AS (DELETE FROM session_log WHERE tenant_id = %(tenant)s "
            "AND owner_id = %(owner)s RETURNING session_id) "
            "SELECT count(DISTINCT session_id) FROM gone"
        )
        with self._db.connection() as conn:
            self._db.lock_key(conn, self._lock_key(ctx), shared=False)
            row = conn.execute(query, self._key(ctx)).fetchone()
        return int(row[0]) if row else 0

    def delete_session(self, ctx: RuntimeContext) -> bool:
        """Delete the session's log; whether there was one."""
        query = (
            "DELETE FROM session_log WHERE tenant_id = %(tenant)s AND owner_id = %(owner)s "
            "AND session_id = %(session)s"
        )
        with self._db.connection() as conn:
            gone = conn.execute(query, {**self._key(ctx), "session": session_of(ctx)}).rowcount
        return gone > 0

    def delete_old(
        self,
        ctx: RuntimeContext,
        *,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        now: datetime | None = None,
    ) -> list[str]:
        """Delete the user's session logs not written to for ``retention_days`` (their last
        message is older); the session ids whose logs went. Maintenance's retention step."""
        params = {**self._key(ctx), "cutoff": retention_cutoff(retention_days, now)}
        query = (
            "WITH old AS (SELECT session_id FROM session_log WHERE tenant_id = %(tenant)s "
            "AND owner_id = %(owner)s GROUP BY session_id HAVING max(created_at) < %(cutoff)s), "
            "gone AS (DELETE FROM session_log AS l USING old WHERE l.tenant_id = %(tenant)s "
            "AND l.owner_id = %(owner)s AND l.session_id = old.session_id "
            "RETURNING l.session_id) SELECT DISTINCT session_id FROM gone"
        )
        with self._db.connection() as conn:
            rows = conn.execute(query, params).fetchall()
        return sorted(row[0] for row in rows)
