"""The PostgreSQL store's embedding model, for the rule of ``store_embedder``: the record is a
row of ``longterm_embedder``, and each fact's row names the model of its vector (``embedder``),
so a re-embed takes the rows that name another one and stamps each batch in the transaction
that writes its vectors."""

from __future__ import annotations

from indexing.embeddings import Embedder
from memory_service.longterm.postgres.rows import FACT_COLUMNS, fact_of
from memory_service.longterm.store_embedder import EmbedderId, EmbedderRecord
from memory_service.stores.binary_arrays import Vector
from memory_service.stores.database import Database

_NAME = "store"


class PostgresEmbedderRecords:
    """``EmbedderRecords`` of the ``longterm_facts`` table of one database."""

    def __init__(self, database: Database, ext: str) -> None:
        self.database = database
        self.description = f"the PostgreSQL long-term store ({database.where})"
        self._vector = '"' + ext.replace('"', '""') + '".vector'

    def read(self) -> EmbedderRecord | None:
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT record FROM longterm_embedder WHERE name = %s", (_NAME,)
            ).fetchone()
        return None if row is None else EmbedderRecord.from_json(row[0], self.description)

    def write(self, record: EmbedderRecord) -> None:
        with self.database.connection() as conn:
            conn.execute(
                "INSERT INTO longterm_embedder (name, record) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record",
                (_NAME, record.to_json()),
            )

    def stale(self, embedder: EmbedderId) -> int:
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM longterm_facts WHERE embedder <> %s", (embedder.model,)
            ).fetchone()
        return int(row[0]) if row else 0

    def reembed(self, embedder: Embedder, limit: int) -> int:
        """One batch: the vector of each fact's searchable text (what a record embeds),
        written with the model's name in one transaction."""
        with self.database.connection() as conn:
            rows = conn.execute(
                f"SELECT {FACT_COLUMNS} FROM longterm_facts WHERE embedder <> %s "
                "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                (embedder.name, limit),
            ).fetchall()
            if not rows:
                return 0
            facts = [fact_of(r) for r in rows]
            vectors = embedder.embed([f.searchable_text for f in facts])
            with conn.cursor() as cur:
                cur.executemany(
                    f"UPDATE longterm_facts SET embedding = %s::{self._vector}, embedder = %s "
                    "WHERE id = %s",
                    [(Vector(v), embedder.name, f.id) for f, v in zip(facts, vectors, strict=True)],
                )
        return len(rows)

    def finish(self, previous: EmbedderId | None) -> None:
        """Nothing to drop: each row held one vector, now the new model's."""
