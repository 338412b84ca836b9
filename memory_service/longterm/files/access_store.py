"""The files backend's access metadata: ``<user>/.index/access.json``, fact id -> ``{"count",
"last"}``. The fact files never hold it (a recall must not rewrite a person's Markdown); it is a
hint, so a torn or hand-broken file reads as empty and counting starts over."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.access import AccessMark
from memory_service.stores.fsutil import ensure_dir, read_text, write_atomically

Stamp = tuple[int, int, int]  # mtime_ns, size, inode


def with_access(fact: Fact, stored: Mapping[str, dict]) -> Fact:
    """``fact`` with its stored access metadata."""
    entry = stored.get(fact.id)
    if not entry:
        return fact
    return replace(
        fact,
        access_count=int(entry.get("count", 0)),
        last_accessed_at=parse_time(entry.get("last")),
    )


class AccessFiles:
    """Every user's access file, parsed once and re-read when it changes on disk."""

    def __init__(self) -> None:
        self._parsed: dict[Path, tuple[Stamp, dict[str, dict]]] = {}

    def read(self, path: Path) -> dict[str, dict]:
        try:
            st = path.stat()
        except FileNotFoundError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._parsed.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            data = json.loads(read_text(path) or "{}")
        except ValueError:
            data = {}
        self._parsed[path] = (stamp, data)
        return data

    def add(self, path: Path, known: Collection[str], marks: Mapping[str, AccessMark]) -> None:
        """Add ``marks`` to the counts of the facts among ``known`` (the user's stored facts:
        entries of deleted facts drop out). Nothing is written when none is known."""
        if not any(fid in known for fid in marks):
            return
        stored = {k: v for k, v in self.read(path).items() if k in known}
        for fid, mark in marks.items():
            if fid not in known:
                continue
            old = stored.get(fid) or {}
            last = parse_time(old.get("last")) if old.get("last") else None
            newest = mark.last if last is None else max(last, mark.last)
            stored[fid] = {
                "count": int(old.get("count", 0)) + mark.count,
                "last": newest.isoformat(),
            }
        ensure_dir(path.parent)
        write_atomically(path, json.dumps(stored, separators=(",", ":")))

    def drop(self, path: Path, ids: Collection[str]) -> None:
        """Forget the counts of ``ids`` (deleted facts)."""
        stored = self.read(path)
        if any(fid in stored for fid in ids):
            kept = {k: v for k, v in stored.items() if k not in ids}
            write_atomically(path, json.dumps(kept, separators=(",", ":")))
