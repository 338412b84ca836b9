"""Every file the service writes with a user's data is readable by its owner alone (0600, its
folders 0700), whatever the process umask: a workspace on a shared host must not leak one
user's words to the other accounts of the machine."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import ACME_ADMIN_KEY, append, auth, make_client, record


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The common default umask (022): files 0644 and folders 0755 unless the code says so."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _loose(root: Path) -> list[str]:
    """Paths under ``root`` that another account could read or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        if mode & 0o077:
            found.append(f"{path.relative_to(root)} {stat.filemode(mode)}")
    return found


def _use_every_store(client) -> None:
    assert record(client, "alice", "Alice takes her coffee black").status_code == 200
    conversation = [
        {"role": "user", "content": "Please grep the ledger"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "grep"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a matching line\n" * 200},
    ]
    appended = append(client, "s1", conversation)
    assert appended.status_code == 200 and appended.json()["evicted"], appended.text
    maintain = {"user_id": "alice", "force": True}
    ran = client.post("/v1/maintenance/run", json=maintain, headers=auth(ACME_ADMIN_KEY))
    assert ran.status_code == 200, ran.text


def test_the_files_backend_writes_nothing_others_can_read(
    tmp_path, embedder, monkeypatch, open_umask
):
    services, client = make_client(
        tmp_path, embedder, monkeypatch, shortterm={"tool_result_max_chars": 256}
    )
    with client:
        _use_every_store(client)
    services.close()
    workspace = tmp_path / "ws"
    assert (workspace / "tenants").is_dir()
    loose = _loose(workspace)
    assert not loose, "\n".join(loose)


def test_the_qdrant_edge_folder_is_closed_to_others(tmp_path, embedder, monkeypatch, open_umask):
    services, client = make_client(tmp_path, embedder, monkeypatch, longterm={"backend": "qdrant"})
    with client:
        assert record(client, "alice", "Alice takes her coffee black").status_code == 200
    services.close()
    workspace = tmp_path / "ws"
    shard = workspace / "qdrant" / "memories"
    assert shard.is_dir()
    # Edge writes its shard's files itself, with the umask's modes: the folders down to the
    # shard, 0700, are what close them to others.
    inside = f"{shard.relative_to(workspace)}/"
    loose = [p for p in _loose(workspace) if not p.startswith(inside)]
    assert not loose, "\n".join(loose)
