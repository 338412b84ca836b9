"""The PostgreSQL backend's tables, their versioned migrations, and the pgvector check.

The tables live in the configured schema (``MEMORY_POSTGRES__SCHEMA_NAME``) beside the replica
state, on their own migration track (``MIGRATION_TRACK``) in ``memory_schema``: a later
version appends a migration, and every process that starts applies the missing ones once
(``Database.ensure_schema``). pgvector's types and operators are named with the schema the
extension lives in, so a deployment schema need not be on its search path.

What holds a user's text, and so what a delete must leave no copy of: ``longterm_facts``
(the fact as JSON, its key) and its TOAST table and indexes; a fact's lexical terms are in its
row as ids (hashes) with their counts; ``longterm_deletes`` only when a delete happened.
Statistics are off for the columns with a user's words, so ``ANALYZE`` copies none of them
into ``pg_statistic``.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from memory_service.domain.errors import ConfigurationError
from memory_service.stores.database import DSN_SETTING, Database

MIGRATION_TRACK = "longterm_postgres"
FACTS = "longterm_facts"
DELETES = "longterm_deletes"
EMBEDDER = "longterm_embedder"


def _migrations(ext: str) -> list[sql.Composable]:
    vector = sql.SQL("{}.vector").format(sql.Identifier(ext))
    first = sql.SQL(
        """
        CREATE TABLE IF NOT EXISTS longterm_facts (
            id uuid PRIMARY KEY,
            tenant_id text NOT NULL,
            owner text NOT NULL,
            scope text NOT NULL,
            user_id text,
            agent_id text,
            key text,
            is_open boolean NOT NULL,
            created_at timestamptz,
            expires_at timestamptz,
            importance integer NOT NULL,
            fact jsonb NOT NULL,
            access_count integer NOT NULL DEFAULT 0,
            last_accessed_at timestamptz,
            doc_len integer NOT NULL,
            embedding {vector} NOT NULL,
            embedder text NOT NULL,
            terms_version integer NOT NULL
        );
        ALTER TABLE longterm_facts ALTER COLUMN fact SET STATISTICS 0;
        ALTER TABLE longterm_facts ALTER COLUMN key SET STATISTICS 0;
        CREATE INDEX IF NOT EXISTS longterm_facts_owner
            ON longterm_facts (tenant_id, owner, created_at, id);
        CREATE UNIQUE INDEX IF NOT EXISTS longterm_facts_open_key
            ON longterm_facts (tenant_id, owner, key) WHERE is_open AND key IS NOT NULL;
        CREATE TABLE IF NOT EXISTS longterm_terms (
            fact_id uuid NOT NULL REFERENCES longterm_facts (id) ON DELETE CASCADE,
            term bigint NOT NULL,
            tenant_id text NOT NULL,
            owner text NOT NULL,
            tf integer NOT NULL,
            is_open boolean NOT NULL,
            PRIMARY KEY (fact_id, term)
        );
        CREATE INDEX IF NOT EXISTS longterm_terms_owner
            ON longterm_terms (tenant_id, owner, term) INCLUDE (fact_id, tf, is_open);
        CREATE TABLE IF NOT EXISTS longterm_deletes (
            at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE IF NOT EXISTS longterm_embedder (
            name text PRIMARY KEY,
            record text NOT NULL
        );
        """
    ).format(vector=vector)
    # A row over ~2 KB (a fact with its source) has its widest columns moved out of line; a
    # vector there is read back from the TOAST table for every fact the dense leg scores.
    # MAIN keeps it in the row (compressed or moved out only if the row fits no other way),
    # and the fact's JSON, read only for the hits, goes out of line first.
    inline_vectors = sql.SQL("ALTER TABLE longterm_facts ALTER COLUMN embedding SET STORAGE MAIN")
    # A posting is written for every distinct term of every fact recorded: its foreign key
    # (a check per posting) cost more than the posting. The backend deletes a fact's
    # postings with it (in the same statement or transaction). The (fact, term) index stays,
    # without its uniqueness check: the dense leg reads each candidate's matched terms from it
    # alone, where an index on the fact alone sends it to the table (``benchmarks/RESULTS.md``,
    # "The record path, after").
    lean_postings = sql.SQL(
        """
        ALTER TABLE longterm_terms DROP CONSTRAINT IF EXISTS longterm_terms_fact_id_fkey;
        ALTER TABLE longterm_terms DROP CONSTRAINT IF EXISTS longterm_terms_pkey;
        CREATE INDEX IF NOT EXISTS longterm_terms_fact ON longterm_terms (fact_id, term);
        """
    )
    # A row with its vector (1.5 KB) and a fact with its source passes the ~2 KB at which
    # PostgreSQL compresses the widest column in place (pglz) or moves it out of line: the
    # fact's JSON, which every recall reads for each of its ~100 hits (session, text, the
    # fact itself), was decompressed on every read (``benchmarks/RESULTS.md``). Rows up
    # to a page are kept whole and uncompressed; rows written before keep their form until
    # they are written again.
    whole_rows = sql.SQL("ALTER TABLE longterm_facts SET (toast_tuple_target = 8160)")
    # Each fact's terms in its own row (ids and counts, two arrays) instead of a posting row
    # per term: a record wrote ~20 postings a fact, each a heap row and two index entries, the
    # most of its time in the database; the lexical leg scans the owner's rows, as the dense
    # leg does (``search.py``), and a deleted fact takes its terms with it.
    terms_in_rows = sql.SQL(
        """
        ALTER TABLE longterm_facts
            ADD COLUMN IF NOT EXISTS terms bigint[] NOT NULL DEFAULT '{}',
            ADD COLUMN IF NOT EXISTS tfs integer[] NOT NULL DEFAULT '{}';
        UPDATE longterm_facts f SET terms = t.terms, tfs = t.tfs
        FROM (
            SELECT fact_id, array_agg(term ORDER BY term) AS terms,
                array_agg(tf ORDER BY term) AS tfs
            FROM longterm_terms GROUP BY fact_id
        ) t
        WHERE t.fact_id = f.id;
        DROP TABLE IF EXISTS longterm_terms;
        """
    )
    # Every change to an owner's rows moves that owner's version, whoever makes it (this
    # service, an older one, a re-embedding, a person with psql), in the transaction that
    # makes it: a process that keeps an owner's rows in memory (``owner_cache.py``) asks for
    # the version before each recall and reads the rows again when it moved. One statement
    # a write: the versions of every owner the statement touched, in one order (no two
    # writers wait for each other's versions crosswise). A version is drawn from one
    # sequence, never used twice, so an owner's row may be deleted with its facts (an erase
    # keeps no user id here) and a later owner of that id meets no version kept from before.
    versions = sql.SQL(
        """
        CREATE SEQUENCE IF NOT EXISTS longterm_version_seq;
        CREATE TABLE IF NOT EXISTS longterm_versions (
            tenant_id text NOT NULL,
            owner text NOT NULL,
            version bigint NOT NULL,
            PRIMARY KEY (tenant_id, owner)
        );
        CREATE OR REPLACE FUNCTION longterm_version_moved() RETURNS trigger
        LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        BEGIN
            INSERT INTO longterm_versions AS v (tenant_id, owner, version)
            SELECT c.tenant_id, c.owner, nextval('longterm_version_seq')
            FROM (SELECT DISTINCT tenant_id, owner FROM changed ORDER BY 1, 2) c
            ON CONFLICT (tenant_id, owner) DO UPDATE SET version = EXCLUDED.version;
            RETURN NULL;
        END
        $$;
        CREATE OR REPLACE FUNCTION longterm_versions_all_moved() RETURNS trigger
        LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
        BEGIN
            UPDATE longterm_versions SET version = nextval('longterm_version_seq');
            RETURN NULL;
        END
        $$;
{triggers}
        INSERT INTO longterm_versions (tenant_id, owner, version)
            SELECT o.tenant_id, o.owner, nextval('longterm_version_seq')
            FROM (SELECT DISTINCT tenant_id, owner FROM longterm_facts) o
            ON CONFLICT (tenant_id, owner) DO NOTHING;
        """
    ).format(triggers=sql.SQL("\n").join(_version_triggers()))
    return [first, inline_vectors, lean_postings, whole_rows, terms_in_rows, versions]


def _version_triggers() -> list[sql.Composable]:
    """A statement trigger per kind of change to the facts, each moving the versions of the
    owners its rows belong to (the rows as written, or as they were for a delete); a
    truncate moves every owner's."""
    kinds = [
        ("longterm_inserted", "INSERT", "REFERENCING NEW TABLE AS changed", "version_moved"),
        ("longterm_updated", "UPDATE", "REFERENCING NEW TABLE AS changed", "version_moved"),
        ("longterm_deleted", "DELETE", "REFERENCING OLD TABLE AS changed", "version_moved"),
        ("longterm_truncated", "TRUNCATE", "", "versions_all_moved"),
    ]
    return [
        sql.SQL(
            "DROP TRIGGER IF EXISTS {name} ON longterm_facts; "
            "CREATE TRIGGER {name} AFTER {event} ON longterm_facts {transition} "
            "FOR EACH STATEMENT EXECUTE FUNCTION {function}();"
        ).format(
            name=sql.Identifier(name),
            event=sql.SQL(event),
            transition=sql.SQL(transition),
            function=sql.Identifier(f"longterm_{function}"),
        )
        for name, event, transition, function in kinds
    ]


def lock_versions(conn: psycopg.Connection, owners: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Of ``owners`` (tenant, owner), those whose version rows this transaction could lock
    without waiting. A writer outside the owners' advisory locks (re-indexing terms at
    open) touches only their rows: the trigger's update of a version a writer holds would
    wait for it while the writer waits for a row it holds."""
    if not owners:
        return set()
    tenants, names = zip(*sorted(owners), strict=True)
    rows = conn.execute(
        "SELECT tenant_id, owner FROM longterm_versions WHERE (tenant_id, owner) IN "
        "(SELECT * FROM unnest(%s::text[], %s::text[])) FOR UPDATE SKIP LOCKED",
        (list(tenants), list(names)),
    ).fetchall()
    return {(str(t), str(o)) for t, o in rows}


def extension_schema(database: Database) -> str:
    """The schema pgvector's ``vector`` lives in, created first where this role may
    (``CREATE EXTENSION`` needs a superuser, or the database's owner where pgvector is marked
    trusted); else a ``ConfigurationError`` of one line saying who must run it."""
    with database.connection() as conn:
        found = _installed(conn)
        if found is not None:
            return found
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
        name = conn.execute("SELECT current_database(), current_user").fetchone()
        dbname, role = (name[0], name[1]) if name else ("?", "?")
        if not available:
            raise ConfigurationError(
                f"{DSN_SETTING}: PostgreSQL ({database.where}) has no pgvector: install the "
                f"pgvector extension on that server, then a superuser runs `CREATE EXTENSION "
                f"vector` in database {dbname} (MEMORY_LONGTERM__BACKEND=postgres needs it)"
            )
    try:
        with database.connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('longterm:create extension'))")
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            found = _installed(conn)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigurationError(
            f"{DSN_SETTING}: database {dbname} has no pgvector extension and role {role} may "
            f"not create it: a superuser (or the database owner, where pgvector is trusted) "
            f"runs `CREATE EXTENSION vector` in database {dbname} once"
        ) from exc
    if found is None:  # created and gone at once: another process dropped it
        raise ConfigurationError(f"{DSN_SETTING}: the vector extension vanished in {dbname}")
    return found


def _installed(conn: psycopg.Connection) -> str | None:
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector'"
    ).fetchone()
    return str(row[0]) if row else None


def ensure_tables(database: Database) -> str:
    """The backend's tables at their newest version; the extension's schema."""
    ext = extension_schema(database)
    database.ensure_schema(MIGRATION_TRACK, _migrations(ext))
    return ext
