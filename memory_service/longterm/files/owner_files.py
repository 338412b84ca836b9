"""Which fact files an owner has on disk, read without following a link: MEMORY.md and the
daily files ``memory/YYYY-MM-DD.md`` and ``memory/archive/YYYY-MM-DD.md`` (their names are
``paths.OwnerPaths``'), each one ``lstat`` and each folder one scan, since every read checks
them, and their signature with the decisions journal's stat; and which owners of a tenant
have any."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from memory_service.domain.paths import OwnerPaths

Signature = tuple[tuple[str, int, int, int], ...]


def _regular_stat(path: str) -> os.stat_result | None:
    """``path``'s own stat when it is a regular file (a symlink is not: never followed)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _dated_files(folder: str, skip: tuple[str, ...]) -> list[tuple[str, os.stat_result]]:
    """The regular ``*.md`` files of ``folder`` in name order, those whose name starts with
    one of ``skip`` left out, with their stats; nothing when the folder is missing or a
    link."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):  # a linked folder is not read
            return []
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".md"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        if name.startswith(skip):
            continue
        path = os.path.join(folder, name)
        if (st := _regular_stat(path)) is not None:
            out.append((path, st))
    return out


def _fact_file_stats(paths: OwnerPaths) -> list[tuple[str, os.stat_result]]:
    """MEMORY.md, the archived daily fact files (``memory/archive/*.md``), then the live ones
    (``memory/*.md``), oldest first within each, with their stats: one ``lstat`` each and one
    directory scan per folder, since every read checks them. An archived file has left the
    working set (the ledger folder, the memory tools' files), never recall: long-term memory
    is kept until it is deleted, however old, as a Qdrant point is."""
    out = []
    memory_md = str(paths.memory_md)
    if (st := _regular_stat(memory_md)) is not None:
        out.append((memory_md, st))
    ledger_dir = str(paths.ledger_dir)
    try:
        if not stat.S_ISDIR(os.lstat(ledger_dir).st_mode):  # a linked folder is not read
            return out
    except (FileNotFoundError, NotADirectoryError):
        return out
    # as ``glob("*.md")``: hidden files are not fact files; nor are MEMORY.md's snapshots
    out += _dated_files(str(paths.archive_dir), (".", "MEMORY."))
    return out + _dated_files(ledger_dir, (".",))


def fact_file_paths(paths: OwnerPaths) -> list[Path]:
    """MEMORY.md and the daily fact files, archived ones too: regular files only. A symlink
    is never followed, so a link planted in ``memory/`` cannot pull another user's file into
    recall."""
    return [Path(name) for name, _ in _fact_file_stats(paths)]


def owners_with_fact_files(folders: Path, paths_of: Callable[[str], OwnerPaths]) -> list[str]:
    """The names of the folders under ``folders`` that are valid ids holding fact files
    (``paths_of`` raises ``ValueError``, as ``InvalidIdError`` is, for a name that is not)."""
    if not folders.is_dir():
        return []
    found = []
    for folder in sorted(p for p in folders.iterdir() if p.is_dir()):
        try:
            paths = paths_of(folder.name)
        except ValueError:  # not an id: not a memory folder
            continue
        if fact_file_paths(paths):
            found.append(folder.name)
    return found


def fact_files_signature(paths: OwnerPaths) -> Signature:
    """What says the user's files changed: each fact file's path, mtime, size and inode, and
    the decisions journal's last (when there is one). Every fact-file write here is an atomic
    replace, i.e. a new inode: another process's rewrite is seen even when it keeps the size
    within one mtime tick; the journal only grows, so its size says it changed."""
    stats = _fact_file_stats(paths)
    journal = str(paths.decisions_journal)
    if (st := _regular_stat(journal)) is not None:
        stats.append((journal, st))
    return tuple((n, st.st_mtime_ns, st.st_size, st.st_ino) for n, st in stats)
