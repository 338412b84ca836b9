"""The OS lock that makes one process the owner of a Qdrant Edge folder.

Why a lock of our own: Edge locks its folder too, but only after ``EdgeShard.load`` has begun
opening the segments, and a second process's failed load truncates files the owner is
writing (its bm25 tracker journal), after which every write of the owner fails. So
``<collection>.lock``, beside the folder and not one of Edge's files, is locked exclusively
and without waiting before Edge is called, and held until the engine closes. The owner writes
its pid and command into it, so a refused process can say who owns the folder. The kernel
drops the lock when the owner exits, killed or not: a stale file never blocks anyone.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from memory_service.stores.fsutil import PRIVATE_FILE, ensure_dir

LOCK_SUFFIX = ".lock"
_MAX_OWNER_BYTES = 4096


@dataclass(frozen=True)
class FolderOwner:
    """Who holds a folder's lock, as its lock file says (``pid`` None: not written yet)."""

    pid: int | None = None
    command: str = ""

    def describe(self) -> str:
        if self.pid is None:
            return "another process"
        return f"{self.command} (pid {self.pid})" if self.command else f"process {self.pid}"

    @property
    def is_server(self) -> bool:
        return self.command.endswith(" serve")


class FolderOwnedError(Exception):
    """The folder's lock is held by another process; nothing of the folder was touched."""

    def __init__(self, owner: FolderOwner) -> None:
        super().__init__(owner.describe())
        self.owner = owner


def lock_path(folder: Path) -> Path:
    """``<parent>/<collection>.lock``: beside the folder, so Edge never sees it."""
    return folder.with_name(folder.name + LOCK_SUFFIX)


def _command() -> str:
    """This process as a user would name it: ``memory-service serve``, ``pytest``..."""
    argv = sys.argv or [""]
    program = Path(argv[0])
    if program.name == "memory-service" or program.parent.name == "memory_service":
        sub = next((a for a in argv[1:] if not a.startswith("-")), "")
        return f"memory-service {sub}".strip()
    if program.name == "__main__.py":
        return program.parent.name
    return program.name or "python"


def _read_owner(fd: int) -> FolderOwner:
    try:
        data = json.loads(os.pread(fd, _MAX_OWNER_BYTES, 0).decode("utf-8"))
        pid = data.get("pid")
        return FolderOwner(pid if isinstance(pid, int) else None, str(data.get("command", "")))
    except (OSError, ValueError, AttributeError):
        return FolderOwner()  # the owner has locked the file but not written it yet


class FolderLock:
    """An exclusive lock on a folder's lock file, held from ``take`` to ``release``."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def take(cls, folder: Path) -> FolderLock:
        """Lock ``folder`` for this process now, or raise ``FolderOwnedError``; never waits."""
        path = lock_path(folder)
        ensure_dir(path.parent)
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE
        )  # no O_TRUNC: the owner's pid stays
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(fd)
            os.close(fd)
            raise FolderOwnedError(owner) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            me = json.dumps({"pid": os.getpid(), "command": _command()}).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, me, 0)
        except OSError:
            pass  # the lock is what counts; the owner's name only makes a message kinder
        return cls(path, fd)

    def release(self) -> None:
        """Clear the owner's name and unlock; the file stays (removing it would race)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the only descriptor drops the flock
