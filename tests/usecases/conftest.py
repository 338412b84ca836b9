from __future__ import annotations

import pytest

from tests.support.api import make_client
from tests.usecases.entry_points import EntryPoints


@pytest.fixture
def entry(tmp_path, embedder, monkeypatch):
    """Every entry point over one service on ``tmp_path/ws`` (files backend, no model)."""
    monkeypatch.delenv("MEMORY_WORKSPACE", raising=False)
    services, client = make_client(tmp_path, embedder, monkeypatch)
    with client, EntryPoints(services, client) as entry:
        yield entry
    services.close()
