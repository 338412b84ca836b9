"""Opening a shard reads its small files ahead: Edge reads them whole as it loads, a page per
fault, so without the hint a load (and a rewrite's swap, which holds calls off through one)
read them a page at a time."""

from __future__ import annotations

import os

import pytest

from memory_service.longterm.qdrant.edge import shard as edge_shard
from memory_service.longterm.qdrant.edge.shard import READ_AHEAD_MAX_BYTES, open_shard, read_ahead


@pytest.fixture
def advised(monkeypatch) -> list[tuple[str, int]]:
    """The files each ``POSIX_FADV_WILLNEED`` named (the real call still runs)."""
    seen: list[tuple[str, int]] = []
    real = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_WILLNEED:
            seen.append((os.readlink(f"/proc/self/fd/{fd}"), length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(edge_shard.os, "posix_fadvise", recording)
    return seen


def test_the_small_files_are_read_ahead_whole_and_the_large_pages_left(tmp_path, advised):
    (tmp_path / "index" / "flags").mkdir(parents=True)
    small = tmp_path / "index" / "flags" / "flags_a.dat"
    small.write_bytes(b"\0" * 4096)
    large = tmp_path / "page_0.dat"
    with large.open("wb") as f:
        f.truncate(READ_AHEAD_MAX_BYTES + 1)
    read_ahead(tmp_path)
    assert advised == [(str(small), 0)]  # length 0: to the end of the file


def test_a_shard_is_read_ahead_before_it_loads(tmp_path, advised):
    open_shard(tmp_path / "c", 8).close()  # made: nothing to read ahead
    assert advised == []
    shard = open_shard(tmp_path / "c", 8)
    try:
        names = {os.path.basename(path) for path, _ in advised}
        assert "edge_config.json" in names
        assert any(name.startswith("flags_") for name in names)  # what the load reads whole
        assert all(os.path.getsize(path) <= READ_AHEAD_MAX_BYTES for path, _ in advised)
    finally:
        shard.close()
