"""Deletes leave no text in the PostgreSQL backend's files: after delete, forget and erase and
the next maintenance pass (``compact_deleted``), a byte scan of the data files of its tables,
their TOAST tables and every index finds none of the deleted words; the kept facts are still
there, so the scan reads what it should."""

from __future__ import annotations

import random
import string
from dataclasses import replace
from pathlib import Path

import psycopg

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source
from tests.support.pgvector import data_folder, postgres_memory, schema_for

ALICE, BOB, CAROL = (RuntimeContext("acme", u) for u in ("alice", "bob", "carol"))


def _relation_files(dsn: str, schema: str) -> list[Path]:
    """Every file of the schema's tables, their TOAST tables and indexes (not the WAL)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # what the buffers hold goes to the files
        rows = conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "UNION SELECT pg_relation_filepath(c.reltoastrelid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.reltoastrelid <> 0 "
            "UNION SELECT pg_relation_filepath(i.indexrelid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_index i ON i.indrelid = c.reltoastrelid WHERE n.nspname = %s",
            (schema, schema, schema),
        ).fetchall()
    root = data_folder()
    return [p for (rel,) in rows if rel for p in root.glob(rel + "*") if p.is_file()]


def _found(files: list[Path], *needles: str) -> set[str]:
    data = [p.read_bytes() for p in files]
    return {n for n in needles if any(n.encode() in d for d in data)}


def test_deleted_text_leaves_the_tables_files_at_the_next_maintenance_pass(
    embedder, pgvector_dsn, tmp_path
):
    memory = postgres_memory(tmp_path, embedder)
    schema = schema_for(tmp_path)
    noise = random.Random(7)
    words = " ".join(
        "".join(noise.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(240)
    )
    long_source = "Xylophonic marmalade " + words  # with the text, over 2 kB: TOAST
    try:
        deleted = memory.record(
            ALICE,
            [
                Fact("Alice collects Zanzibarian stamps", key="hobby"),
                Fact(
                    "Alice was born in Quuxville " + words[:900],
                    source=Source("chat", text=long_source),
                ),
            ],
        )
        memory.record(ALICE, [Fact("Alice keeps Ostrogothic coins")])
        memory.record(BOB, [Fact("Bob sails a Vorpalian ketch", key="boat")])
        memory.record(CAROL, [Fact("Carol reads Brobdingnagian atlases")])
        memory.record(CAROL, [Fact("Carol drinks Fizzlewhump tea")])
        stamps = Fact("Alice collects Zanzibarian stamps", key="hobby", id=deleted[0].id)
        assert memory.update(ALICE, [replace(stamps, importance=8)]) == 1  # an old version too
        needles = ("Zanzibarian", "Quuxville", "Xylophonic", "Vorpalian", "Brobdingnagian", "hobby")
        assert _found(_relation_files(pgvector_dsn, schema), *needles) == set(needles)
        assert memory.delete(ALICE, [r.id for r in deleted]) == 2
        assert memory.forget(BOB) == 1
        assert memory.erase_user(CAROL) == 2
        memory.record(CAROL, [Fact("Carol drinks Fizzlewhump tea")])  # recorded again: kept
        files = _relation_files(pgvector_dsn, schema)
        assert _found(files, *needles), "a plain delete leaves the words in the files"
        assert memory.compact_deleted() is True  # the maintenance pass's rewrite
        files = _relation_files(pgvector_dsn, schema)
        assert _found(files, *needles) == set()
        assert _found(files, "Ostrogothic", "Fizzlewhump") == {"Ostrogothic", "Fizzlewhump"}
        assert memory.compact_deleted() is False  # nothing deleted since: no rewrite
        assert [r.fact.text for r in memory.retrieve(ALICE, "coins")] == [
            "Alice keeps Ostrogothic coins"
        ]
    finally:
        memory.close()
