"""A writer process for the PostgreSQL backend's multi-process tests:
``python -m tests.support.pg_writer DSN SCHEMA NAME COUNT GO_FILE`` opens the backend, waits
for ``GO_FILE`` (so two writers start together), records ``COUNT`` rounds of two facts for
one user (one unkeyed, one on the key ``color``), and prints the acknowledged ids as JSON."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(dsn: str, schema: str, name: str, count: int, go: Path) -> None:
    from indexing.onnx_embeddings import OnnxEmbedder
    from memory_service.config.settings import PostgresSettings
    from memory_service.domain.context import RuntimeContext
    from memory_service.domain.facts import Fact
    from memory_service.longterm.near_duplicates import OFF
    from memory_service.longterm.postgres.backend import open_postgres

    settings = PostgresSettings(dsn=dsn, schema_name=schema, pool_max=2)
    memory = open_postgres(settings, OnnxEmbedder(threads=1), near_duplicates=OFF)
    ctx = RuntimeContext("acme", "shared-user")
    while not go.exists():
        time.sleep(0.01)
    acknowledged = []
    for i in range(count):
        results = memory.record(
            ctx,
            [
                Fact(f"Writer {name} noted item number {i}"),
                Fact(f"Writer {name} says the color is shade {i}", key="color"),
            ],
        )
        acknowledged += [r.id for r in results]
    memory.close()
    print(json.dumps(acknowledged))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
