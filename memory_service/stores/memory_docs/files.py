"""MEMORY.md and its snapshots as files in the owner's workspace folder (same paths, same bytes,
under the owner's long-term lock). The files backend reads MEMORY.md's bullets as facts, so
with that backend the documents stay files: they are its human-readable memory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memory_service.domain.context import RuntimeContext
from memory_service.domain.paths import OwnerPaths
from memory_service.stores.fsutil import ensure_dir, file_lock, read_text, write_atomically
from memory_service.stores.memory_docs import (
    MEMORY_MD,
    MemoryDocs,
    Snapshot,
    snapshot_stamp,
)
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones


class FilesMemoryDocs:
    """The documents as files: ``MEMORY.md`` and ``memory/archive/MEMORY.<stamp>.md`` in the
    owner's folder, written atomically under the owner's long-term lock (``.memory.lock``)."""

    in_workspace = True

    def __init__(self, workspace: Path, *, tombstones: Tombstones | None = None) -> None:
        self.workspace = Path(workspace)
        self.tombstones = tombstones or FilesTombstones(self.workspace)

    def _paths(self, ctx: RuntimeContext) -> OwnerPaths:
        return OwnerPaths.of(self.workspace, ctx)

    @staticmethod
    def _files(paths: OwnerPaths) -> list[Path]:
        found = [paths.memory_md] if paths.memory_md.is_file() else []
        if paths.archive_dir.is_dir() and not paths.archive_dir.is_symlink():
            found += sorted(paths.archive_dir.glob("MEMORY.*.md"))
        return found

    def read(self, ctx: RuntimeContext) -> str:
        return read_text(self._paths(ctx).memory_md)

    def read_named(self, ctx: RuntimeContext, name: str) -> str | None:
        paths = self._paths(ctx)
        stamp = snapshot_stamp(name)
        if name != MEMORY_MD and stamp is None:
            return None
        path = paths.memory_md if stamp is None else paths.memory_snapshot(stamp)
        return read_text(path) if path.is_file() else None

    def write(
        self,
        ctx: RuntimeContext,
        text: str,
        *,
        snapshot: Snapshot | None = None,
        check: bool = True,
    ) -> str | None:
        paths = self._paths(ctx)
        if check:
            self.tombstones.check(ctx)  # before the folder is made again
        ensure_dir(paths.root)
        kept: Path | None = None
        with file_lock(paths.lock_file, timeout=60):
            if check:
                self.tombstones.check(ctx)  # under the lock an erase takes too
            if snapshot is not None and snapshot.text:
                kept = paths.memory_snapshot(snapshot.stamp)
                write_atomically(kept, snapshot.text)
            write_atomically(paths.memory_md, text)
        return str(kept) if kept else None

    def edit(self, ctx: RuntimeContext, change: Callable[[str], str | None]) -> None:
        paths = self._paths(ctx)
        if not paths.memory_md.is_file():
            return
        with file_lock(paths.lock_file, timeout=60):
            changed = change(read_text(paths.memory_md))
            if changed is not None:
                write_atomically(paths.memory_md, changed)

    def snapshots(self, ctx: RuntimeContext) -> list[str]:
        paths = self._paths(ctx)
        names = [f"memory/archive/{p.name}" for p in self._files(paths) if p != paths.memory_md]
        return [name for name in names if snapshot_stamp(name) is not None]

    def write_snapshot(self, ctx: RuntimeContext, snapshot: Snapshot) -> str:
        paths = self._paths(ctx)
        self.tombstones.check(ctx)
        ensure_dir(paths.root)
        with file_lock(paths.lock_file, timeout=60):
            self.tombstones.check(ctx)
            path = paths.memory_snapshot(snapshot.stamp)
            write_atomically(path, snapshot.text)
        return str(path)

    def count_user(self, ctx: RuntimeContext) -> int:
        return len(self._files(self._paths(ctx)))

    def erase_user(self, ctx: RuntimeContext) -> int:
        paths = self._paths(ctx)
        if not paths.root.is_dir():
            return 0
        with file_lock(paths.lock_file, timeout=60):
            files = self._files(paths)
            for path in files:
                path.unlink(missing_ok=True)
        return len(files)


def documents(docs: MemoryDocs | None, workspace: Path) -> MemoryDocs:
    """``docs``, or the files of ``workspace`` when none was given (the single-node default)."""
    return docs if docs is not None else FilesMemoryDocs(workspace)
