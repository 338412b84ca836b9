"""Arrays sent in PostgreSQL's binary form read back as what was sent, on a real server:
every float32 of a vector exact, 64-bit term ids whole, uuids, empty arrays."""

from __future__ import annotations

import uuid

import numpy as np
import psycopg

from memory_service.stores.binary_arrays import Float4s, Int4s, Int8s, Uuids


def test_each_array_reads_back_as_sent(pgvector_dsn):
    rng = np.random.default_rng(5)
    vector = rng.standard_normal(384).astype(np.float32)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    with psycopg.connect(pgvector_dsn) as conn:
        row = conn.execute(
            "SELECT %s::real[], %s::uuid[], %s::bigint[], %s::int[], %s::bigint[]",
            (
                Float4s(vector),
                Uuids(ids),
                Int8s([1, 2**63 - 1, 5]),
                Int4s([3, -4]),
                Int8s([]),
            ),
        ).fetchone()
    assert np.array_equal(np.asarray(row[0], dtype=np.float32), vector)
    assert [str(u) for u in row[1]] == ids
    assert row[2:] == ([1, 2**63 - 1, 5], [3, -4], [])


def test_a_flat_array_of_vectors_slices_into_pgvectors(pgvector_dsn):
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    with psycopg.connect(pgvector_dsn) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('longterm:create extension'))")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        ext = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
            "ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        ).fetchone()[0]
        rows = conn.execute(
            f'SELECT (%s::real[])[(i - 1) * 4 + 1 : i * 4]::"{ext}".vector::text '
            "FROM generate_series(1, 3) AS i ORDER BY i",
            (Float4s(vectors),),
        ).fetchall()
    assert [r[0] for r in rows] == ["[" + ",".join(f"{x:g}" for x in v) + "]" for v in vectors]
