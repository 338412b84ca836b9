"""Durable, private file writes: appends are fsynced, rewrites are atomic (temp file +
os.replace), and every file is created 0600 and every folder 0700, whatever the umask.

Invariants: nothing acknowledged is lost, a crash leaves either the old or the new file, and
no other account of the machine can read a user's data (under the common umask 022 a plain
``open`` would make it world-readable).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from filelock import FileLock

PRIVATE_FILE = 0o600  # every file holding user data: its owner alone reads it
PRIVATE_DIR = 0o700
TEMP_SUFFIX = ".tmp"  # ``.<name>.<random>.tmp`` beside the file an atomic write replaces


def fsync_dir(path: Path) -> None:
    """Make a create/rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> Path:
    """``path`` and its missing parents, each created 0700 (``mkdir -p`` would make the
    parents with the umask's default, 0755 under umask 022). Existing folders are left as
    they are: their modes are their owner's choice."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # made meanwhile by another thread or process
            continue
    return path


def file_lock(path: Path, *, timeout: float = -1) -> FileLock:
    """A ``filelock.FileLock`` on ``path`` (its folder made), its lock file created 0600."""
    ensure_dir(path.parent)
    return FileLock(str(path), timeout=timeout, mode=PRIVATE_FILE)


def append_durably(path: Path, text: str, *, header: str = "") -> None:
    """Append ``text`` (UTF-8), fsync it; a new file starts with ``header``."""
    ensure_dir(path.parent)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    with open(fd, "a", encoding="utf-8", newline="\n") as handle:
        if created and header:
            handle.write(header)
        elif not created and path.stat().st_size > 0 and not _ends_with_newline(path):
            handle.write("\n")  # a hand edit may have left the last line open
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    if created:
        fsync_dir(path.parent)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new content, never half."""
    write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, ``os.replace``, fsync the folder."""
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def remove_stale_temp_files(folder: Path, *, older_than: timedelta, now: datetime) -> list[Path]:
    """Delete the temp files of atomic writes that a killed process left under ``folder``.

    A write that fails cleans up after itself, but a SIGKILL (or power loss) between
    ``mkstemp`` and ``os.replace`` leaves ``.<name>.<random>.tmp`` behind for ever. A live
    write holds its temp file for milliseconds, so one older than ``older_than`` is an orphan.
    Links are neither followed nor removed. Returns what was removed."""
    cutoff = (now - older_than).timestamp()
    removed: list[Path] = []
    for root, _dirs, files in os.walk(folder):  # os.walk does not follow directory links
        for name in files:
            if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                continue
            path = Path(root) / name
            try:
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode) or info.st_mtime >= cutoff:
                    continue
                path.unlink()
            except FileNotFoundError:  # replaced or removed meanwhile: not ours to count
                continue
            removed.append(path)
    return removed


def read_text(path: Path) -> str:
    """File text, or '' when it does not exist. Invalid UTF-8 is replaced, not fatal."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


@contextmanager
def try_file_lock(path: Path) -> Iterator[bool]:
    """A non-blocking lock on ``path`` held for the block: yields False (holding nothing) when
    another process or thread holds it, so the caller reports ``busy`` instead of waiting."""
    from filelock import Timeout

    lock = file_lock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
