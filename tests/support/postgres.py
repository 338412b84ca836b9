"""The test PostgreSQL: one DSN for every test and fixture that needs it."""

from __future__ import annotations

import os

PG_DSN = os.environ.get("MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
