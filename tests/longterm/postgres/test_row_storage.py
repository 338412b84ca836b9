"""A fact's row is kept whole: its JSON, which every recall reads for each of its hits, is
neither compressed in place nor moved out of line when the row with its vector and a source
passes the ~2 KB at which PostgreSQL would otherwise do both (what decompressing it cost a
recall: ``benchmarks/RESULTS.md``)."""

from __future__ import annotations

import psycopg

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source
from tests.support.pgvector import postgres_memory, schema_for

ALICE = RuntimeContext("acme", "alice")


def test_a_fact_with_its_source_is_stored_whole_in_its_row(embedder, pgvector_dsn, tmp_path):
    memory = postgres_memory(tmp_path, embedder)
    source = "Alice said she keeps bees on the roof of her building. " * 20  # ~1.1 KB
    try:
        recorded = memory.record(
            ALICE, [Fact("Alice keeps bees", source=Source("chat", text=source))]
        )
        with psycopg.connect(pgvector_dsn) as conn:
            conn.execute(f"SET search_path = {schema_for(tmp_path)}, public")
            size, compression, row = conn.execute(
                "SELECT pg_column_size(f.fact), pg_column_compression(f.fact), "
                "pg_column_size(f.*) FROM longterm_facts f WHERE f.id = %s",
                (recorded[0].id,),
            ).fetchone()
        assert row > 2_100, "the row is past the size PostgreSQL compresses at by default"
        assert compression is None and size > len(source), "the JSON is whole, uncompressed"
        assert memory.retrieve(ALICE, "bees", 1)[0].fact.source.text == source
    finally:
        memory.close()
