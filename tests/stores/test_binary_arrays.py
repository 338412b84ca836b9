"""Arrays sent in PostgreSQL's binary form read back as what was sent, on a real server:
64-bit term ids whole, uuids, empty arrays, every float32 of a pgvector exact."""

from __future__ import annotations

import uuid

import numpy as np
import psycopg
import pytest

from memory_service.stores.binary_arrays import (
    Int4s,
    Int8s,
    Uuids,
    Vector,
    Vectors,
    vector_type_oid,
)


def test_each_array_reads_back_as_sent(pgvector_dsn):
    ids = [str(uuid.uuid4()) for _ in range(3)]
    with psycopg.connect(pgvector_dsn) as conn:
        row = conn.execute(
            "SELECT %s::uuid[], %s::bigint[], %s::int[], %s::bigint[]",
            (
                Uuids(ids),
                Int8s([1, 2**63 - 1, 5]),
                Int4s([3, -4]),
                Int8s([]),
            ),
        ).fetchone()
    assert [str(u) for u in row[0]] == ids
    assert row[1:] == ([1, 2**63 - 1, 5], [3, -4], [])


def _vector_schema(conn: psycopg.Connection) -> str:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('longterm:create extension'))")
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
        "ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()[0]


def test_vectors_read_back_as_pgvectors_every_float_exact(pgvector_dsn):
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((3, 384)).astype(np.float32)
    with psycopg.connect(pgvector_dsn) as conn:
        vector = f'"{_vector_schema(conn)}".vector'
        oid = vector_type_oid(conn, vector)
        one = conn.execute(f"SELECT %s::{vector}::real[]", (Vector(matrix[1]),)).fetchone()[0]
        rows = conn.execute(
            f"SELECT v::real[] FROM unnest(%s::{vector}[]) WITH ORDINALITY AS x(v, i) ORDER BY i",
            (Vectors(matrix, oid),),
        ).fetchall()
        none = conn.execute(
            f"SELECT cardinality(%s::{vector}[])", (Vectors(matrix[:0], oid),)
        ).fetchone()[0]
    assert np.array_equal(np.asarray(one, dtype=np.float32), matrix[1])
    assert np.array_equal(np.asarray([r[0] for r in rows], dtype=np.float32), matrix)
    assert none == 0


def test_a_vector_type_that_is_not_there_is_a_clear_error(pgvector_dsn):
    with psycopg.connect(pgvector_dsn) as conn, pytest.raises(LookupError, match="nowhere.vector"):
        vector_type_oid(conn, "nowhere.vector")
