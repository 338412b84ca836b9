"""The test Redis (127.0.0.1:6379 on every machine here and in CI, before the tests start)."""

from __future__ import annotations

import os

REDIS_URL = os.environ.get("MEMORY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def drop_prefix(prefix: str) -> None:
    """Delete every key under ``prefix`` (one test's keys)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
