"""A fresh, empty long-term backend per memory, built from Settings like the service builds it.

Every memory of a benchmark gets its own temporary workspace, so no run sees another's facts
and ``--backend qdrant`` goes through exactly the code path ``memory-service serve`` uses.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from indexing.embeddings import Embedder
from memory_service.config.retrieval import preset as lookup
from memory_service.config.settings import Settings
from memory_service.longterm.protocol import LongTermMemory


def settings_for(base: Settings, workspace: Path) -> Settings:
    """``base`` moved to ``workspace``; an embedded Qdrant store moves along with it. A
    benchmark's memories are dated in the past by design (LoCoMo's 2023 sessions): expiry by
    importance would hide them all, so it is off (a fact's own ``expires_at`` still counts)."""
    longterm = base.longterm.model_copy(update={"expire_by_importance": False})
    update: dict[str, object] = {"workspace": workspace, "longterm": longterm}
    if base.qdrant.url is None:
        update["qdrant"] = base.qdrant.model_copy(update={"path": workspace / "qdrant"})
    return base.model_copy(update=update)


def with_backend(base: Settings, backend: str | None, preset: str | None) -> Settings:
    """``base`` with the long-term backend and retrieval preset chosen on the command line."""
    longterm: dict[str, object] = {}
    if backend:
        longterm["backend"] = backend
    if preset:
        lookup(preset, base.longterm.presets)  # unknown name: a clear error now, not later
        longterm["retrieval_preset"] = preset
    if not longterm:
        return base
    return base.model_copy(update={"longterm": base.longterm.model_copy(update=longterm)})


class FreshBackends:
    """Hands out empty backends, each in its own temporary workspace under ``root``."""

    def __init__(self, settings: Settings, embedder: Embedder, root: Path | None = None) -> None:
        self.settings = settings
        self.embedder = embedder
        self.root = root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def fresh(self) -> Iterator[LongTermMemory]:
        from memory_service.services.stores import build_longterm

        with tempfile.TemporaryDirectory(prefix="memory-bench-", dir=self.root) as tmp:
            settings = settings_for(self.settings, Path(tmp))
            schema = None
            if settings.longterm.backend == "postgres":  # a schema of its own, dropped after
                schema = f"bench_{uuid.uuid4().hex[:16]}"
                postgres = settings.postgres.model_copy(update={"schema_name": schema})
                settings = settings.model_copy(update={"postgres": postgres})
            try:
                memory = build_longterm(settings, self.embedder)
                try:
                    yield memory
                finally:
                    memory.close()
            finally:
                if schema is not None:
                    _drop_schema(settings.postgres.dsn or "", schema)


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
