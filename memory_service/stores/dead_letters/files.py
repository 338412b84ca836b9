"""Dead letters as a file: the one module that reads and writes ``dead-letters/flush.jsonl``.

- **append** is flushed and fsynced under the file's lock: a flush that reports its dead letter
  has it on disk;
- **read** splits on ``\n`` only (entries are written with ``ensure_ascii=False``, so a U+2028
  inside a message must not split a line) and keeps every line's exact bytes: a line that is
  not an entry of this user is counted as malformed, never dropped or re-encoded;
- **rewrite** (after a replay) re-reads the file under the same lock and changes only the exact
  lines it was given, once each: lines appended meanwhile survive, and the new file replaces
  the old one atomically.

A line without ``version`` was written before the field existed and reads as version 1; a line
of a newer version is malformed here (kept as it is for the version that wrote it).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from filelock import FileLock

from memory_service.domain.context import RuntimeContext
from memory_service.domain.paths import OwnerPaths
from memory_service.observe.telemetry import sink
from memory_service.stores.dead_letters import (
    LOCK_TIMEOUT_S,
    Change,
    DeadLetter,
    DeadLetterRead,
    _letter,
)
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.fsutil import (
    append_durably,
    ensure_dir,
    file_lock,
    try_file_lock,
    write_bytes_atomically,
)
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

log = logging.getLogger(__name__)


def has_dead_letters(paths: OwnerPaths) -> bool:
    """Whether the user's dead-letter file exists and is not empty (no lock, no parsing)."""
    path = paths.flush_dead_letters
    return path.is_file() and path.stat().st_size > 0


class FilesDeadLetterBox:
    """One user's ``dead-letters/flush.jsonl``; every path is checked to be in their folder."""

    def __init__(self, paths: OwnerPaths, tombstones: Tombstones | None = None) -> None:
        self.paths = paths
        self.path = paths.inside(paths.flush_dead_letters)
        self.tombstones = tombstones or FilesTombstones(paths.workspace)

    @classmethod
    def of(
        cls, workspace: Path, ctx: RuntimeContext, tombstones: Tombstones | None = None
    ) -> FilesDeadLetterBox:
        return cls(OwnerPaths.of(workspace, ctx), tombstones)

    @property
    def relative(self) -> str:
        """The file's path inside the user's folder, as reports name it."""
        return str(self.path.relative_to(self.paths.root.resolve()))

    def exists(self) -> bool:
        return self.path.exists()

    def lock(self) -> FileLock:
        """The lock every append, read and rewrite holds."""
        lock_path = self.paths.inside(self.paths.flush_dead_letters_lock)
        return file_lock(lock_path, timeout=LOCK_TIMEOUT_S)

    @contextlib.contextmanager
    def replaying(self) -> Iterator[bool]:
        """Held while one replay of this user runs: yields False (holding nothing) when
        another replay holds it. The append lock stays free meanwhile, so flushes go on."""
        with try_file_lock(self.paths.inside(self.paths.flush_replay_lock)) as got:
            yield got

    def append(self, record: DeadLetterRecord, ctx: RuntimeContext | None = None) -> None:
        """Add one line, flushed and fsynced before this returns. With ``ctx`` (the flush's),
        refused with ``UserErasedError`` when the user was erased since its work began."""
        tombstones = self.tombstones if ctx is not None else None
        if tombstones is not None and ctx is not None:
            tombstones.check(ctx)  # before the folder is made again
        ensure_dir(self.path.parent)
        with self.lock():
            if tombstones is not None and ctx is not None:
                tombstones.check(ctx)  # under the lock an erase takes too
            append_durably(self.path, record.to_json() + "\n")
        sink().dead_letter("flush")

    def remove_user(self, owner: RuntimeContext) -> int:
        """Remove the records of ``owner`` (tenant and user, whatever their version or
        session), under the lock, as one atomic rewrite; the file goes when nothing else is
        left in it. Returns how many records went."""
        if not self.exists():
            return 0
        with self.lock():
            lines = self._lines()
            kept = [line for line in lines if not _owned_by(line, owner)]
            removed = sum(1 for line in lines if line.strip()) - sum(
                1 for line in kept if line.strip()
            )
            if not any(line.strip() for line in kept):
                self.path.unlink(missing_ok=True)
            elif removed:
                write_bytes_atomically(self.path, b"".join(line + b"\n" for line in kept))
        return removed

    def read(self, owner: RuntimeContext) -> DeadLetterRead:
        """The entries of ``owner`` (tenant and user; the session comes from each entry) and
        the count of other lines; blank lines are neither."""
        if not self.exists():
            return DeadLetterRead([], 0)
        with self.lock():
            lines = self._lines()
        letters: list[DeadLetter] = []
        malformed = 0
        for index, line in enumerate(lines):
            text = line.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            try:
                letters.append(_letter(index, line, text, owner))
            except ValueError as exc:  # JSONDecodeError, InvalidInputError and InvalidIdError too
                malformed += 1
                log.warning(
                    "dead letter line %d of %s/%s kept as is: %s",
                    index + 1,
                    owner.tenant_id,
                    owner.user_id,
                    exc,
                )
        return DeadLetterRead(letters, malformed)

    def rewrite(self, changes: Iterable[Change]) -> None:
        """Apply ``changes`` (each entry's new record, or None to drop it) to the file as it is
        now: re-read under the lock, so lines appended meanwhile survive, and change each given
        line once (an identical copy of it elsewhere is its own entry). Blank lines go; every
        other line keeps its bytes. Atomic: a crash leaves the old file or the new one."""
        pending: dict[bytes, deque[bytes | None]] = {}
        for letter, record in changes:
            pending.setdefault(letter.line, deque()).append(
                None if record is None else record.to_line()
            )
        if not self.exists():  # erased meanwhile: nothing to keep, nothing to bring back
            return
        with self.lock():
            if not self.exists():
                return
            kept: list[bytes] = []
            for line in self._lines():
                queue = pending.get(line)
                if queue:
                    replacement = queue.popleft()
                    if replacement is not None:
                        kept.append(replacement)
                elif line.decode("utf-8", errors="replace").strip():
                    kept.append(line)
            write_bytes_atomically(self.path, b"".join(line + b"\n" for line in kept))

    def _lines(self) -> list[bytes]:
        """The file's lines without their newlines (``\\n`` only); ``[]`` when it is absent."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return lines


def _owned_by(line: bytes, owner: RuntimeContext) -> bool:
    """Whether ``line`` is a record of ``owner``: a JSON object naming its tenant and user."""
    try:
        data = json.loads(line.decode("utf-8", errors="replace"))
    except ValueError:
        return False
    return isinstance(data, dict) and (data.get("tenant_id"), data.get("user_id")) == (
        owner.tenant_id,
        owner.user_id,
    )


class FilesDeadLetterStore:
    """The flush dead letters of a workspace's users, one file each (``DeadLetterStore``)."""

    def __init__(self, workspace: Path, tombstones: Tombstones | None = None) -> None:
        self.workspace = Path(workspace)
        self.tombstones = tombstones

    def box(self, ctx: RuntimeContext) -> FilesDeadLetterBox:
        return FilesDeadLetterBox.of(self.workspace, ctx, self.tombstones)

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many of the user's records the dead-letter file holds (read without the lock)."""
        paths = OwnerPaths.of(self.workspace, ctx)
        if not has_dead_letters(paths):
            return 0
        return sum(1 for line in FilesDeadLetterBox(paths)._lines() if _owned_by(line, ctx))

    def erase_user(self, ctx: RuntimeContext) -> int:
        return self.box(ctx).remove_user(ctx)
