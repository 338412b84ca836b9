"""Services are built from Settings alone, and a failed build releases what it opened."""

from __future__ import annotations

import pytest

from memory_service.config import load_settings
from memory_service.domain.errors import MemoryServiceError
from memory_service.longterm.qdrant.edge.engine import _registry as edge_registry
from memory_service.services import build_services


@pytest.mark.slow
def test_a_failed_build_releases_the_qdrant_edge_folder(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    broken = load_settings(
        workspace=tmp_path / "ws",
        longterm={"backend": "qdrant"},
        shortterm={"backend": "postgres"},
        postgres={"dsn": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"},
    )
    with pytest.raises(MemoryServiceError):
        build_services(broken, embedder=embedder)
    # Nothing in this process holds the shard any more: another process could open it.
    assert not any(str(tmp_path) in str(folder) for folder in edge_registry)
    working = load_settings(workspace=tmp_path / "ws", longterm={"backend": "qdrant"})
    services = build_services(working, embedder=embedder)  # the folder is free again
    try:
        assert services.describe_storage().startswith("long-term backend: qdrant edge (")
    finally:
        services.close()
