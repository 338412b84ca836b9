"""Token usage and pipeline counters per tenant in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``).

The same totals as ``usage.json`` (``stores/usage/files.py``), one row per tenant and purpose
(tokens) or tenant and counter name; each ``record`` adds to the rows with
``INSERT ... ON CONFLICT DO UPDATE SET x = x + EXCLUDED.x`` in one transaction, so the usage of
replicas sharing the database sums, and a failed write adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memory_service.llm import Usage
from memory_service.stores.database import Database

FIELDS = ("calls", "prompt_tokens", "completion_tokens", "total_tokens")

MIGRATIONS = [
    """CREATE TABLE IF NOT EXISTS memory_usage_tokens (
        tenant_id text NOT NULL,
        purpose text NOT NULL,
        calls bigint NOT NULL DEFAULT 0,
        prompt_tokens bigint NOT NULL DEFAULT 0,
        completion_tokens bigint NOT NULL DEFAULT 0,
        total_tokens bigint NOT NULL DEFAULT 0,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (tenant_id, purpose)
    )""",
    """CREATE TABLE IF NOT EXISTS memory_usage_counters (
        tenant_id text NOT NULL,
        name text NOT NULL,
        value bigint NOT NULL DEFAULT 0,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (tenant_id, name)
    )""",
]

_ADD_TOKENS = """
INSERT INTO memory_usage_tokens
    (tenant_id, purpose, calls, prompt_tokens, completion_tokens, total_tokens, updated_at)
VALUES (%s, %s, 1, %s, %s, %s, %s)
ON CONFLICT (tenant_id, purpose) DO UPDATE SET
    calls = memory_usage_tokens.calls + EXCLUDED.calls,
    prompt_tokens = memory_usage_tokens.prompt_tokens + EXCLUDED.prompt_tokens,
    completion_tokens = memory_usage_tokens.completion_tokens + EXCLUDED.completion_tokens,
    total_tokens = memory_usage_tokens.total_tokens + EXCLUDED.total_tokens,
    updated_at = GREATEST(memory_usage_tokens.updated_at, EXCLUDED.updated_at)
"""

_ADD_COUNTER = """
INSERT INTO memory_usage_counters (tenant_id, name, value, updated_at) VALUES (%s, %s, %s, %s)
ON CONFLICT (tenant_id, name) DO UPDATE SET
    value = memory_usage_counters.value + EXCLUDED.value,
    updated_at = GREATEST(memory_usage_counters.updated_at, EXCLUDED.updated_at)
"""


class PostgresUsageStore:
    """``FilesUsageStore`` over PostgreSQL: the same ``record`` and the same ``report`` shape."""

    def __init__(self, database: Database) -> None:
        self.database = database
        database.ensure_schema("usage", MIGRATIONS)

    def record(
        self,
        tenant_id: str,
        *,
        tokens: Mapping[str, Usage] | None = None,
        counters: Mapping[str, int] | None = None,
    ) -> None:
        """Add ``tokens`` (purpose -> one call's usage) and ``counters`` in one transaction."""
        tokens = {p: u for p, u in (tokens or {}).items() if u is not None}
        counters = {k: v for k, v in (counters or {}).items() if v}
        if not tokens and not counters:
            return
        now = datetime.now(UTC)
        with self.database.connection() as conn, conn.cursor() as cur:
            if tokens:
                cur.executemany(
                    _ADD_TOKENS,
                    [
                        (tenant_id, p, u.prompt_tokens, u.completion_tokens, u.total_tokens, now)
                        for p, u in sorted(tokens.items())  # one order: no deadlock between two
                    ],
                )
            if counters:
                cur.executemany(
                    _ADD_COUNTER, [(tenant_id, k, v, now) for k, v in sorted(counters.items())]
                )

    def report(self, tenant_id: str) -> dict[str, Any]:
        """The tenant's totals: ``tokens`` by purpose plus ``total``, and ``counters``."""
        with self.database.connection() as conn:
            token_rows = conn.execute(
                "SELECT purpose, calls, prompt_tokens, completion_tokens, total_tokens, "
                "updated_at FROM memory_usage_tokens WHERE tenant_id = %s ORDER BY purpose",
                (tenant_id,),
            ).fetchall()
            counter_rows = conn.execute(
                "SELECT name, value, updated_at FROM memory_usage_counters "
                "WHERE tenant_id = %s ORDER BY name",
                (tenant_id,),
            ).fetchall()
        tokens = {row[0]: dict(zip(FIELDS, map(int, row[1:5]), strict=True)) for row in token_rows}
        total = {name: sum(row[name] for row in tokens.values()) for name in FIELDS}
        stamps = [row[-1] for row in (*token_rows, *counter_rows)]
        return {
            "tenant_id": tenant_id,
            "tokens": tokens,
            "counters": {row[0]: int(row[1]) for row in counter_rows},
            "updated_at": max(stamps).astimezone(UTC).isoformat() if stamps else None,
            "total": total,
        }
