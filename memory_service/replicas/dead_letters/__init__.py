"""The flush's dead letters: the one module that reads and writes ``dead-letters/flush.jsonl``.

A flush that fails after its retries appends one JSON line (a ``DeadLetterRecord``) to the
user's file; for a ``pre_compaction`` or ``overflow`` failure it is the only copy of the
messages once compaction has run, so the file follows three rules:

- **append** is flushed and fsynced under the file's lock: a flush that reports its dead letter
  has it on disk;
- **read** splits on ``\\n`` only (entries are written with ``ensure_ascii=False``, so a U+2028
  inside a message must not split a line) and keeps every line's exact bytes: a line that is
  not an entry of this user is counted as malformed, never dropped or re-encoded;
- **rewrite** (after a replay) re-reads the file under the same lock and changes only the exact
  lines it was given, once each: lines appended meanwhile survive, and the new file replaces
  the old one atomically.

A line without ``version`` was written before the field existed and reads as version 1; a line
of a newer version is malformed here (kept as it is for the version that wrote it).

``DeadLetterBox`` (one user's letters) and ``DeadLetterStore`` (every user's, as the flush,
the replay and erasure see them) are the narrow interface this file and the PostgreSQL table
(``dead_letters_pg.py``, ``MEMORY_STATE__BACKEND=postgres``) share.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from memory_service.context import RuntimeContext
from memory_service.replicas.dead_letters.record import DeadLetterRecord

LOCK_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One well-formed line of a user's file: its exact bytes (its identity in the file), its
    record, and the context to replay it in (the owner, with the record's session)."""

    index: int
    line: bytes
    record: DeadLetterRecord
    ctx: RuntimeContext


@dataclass(frozen=True, slots=True)
class DeadLetterRead:
    """The file as one read saw it: its entries, and how many lines were not entries."""

    letters: list[DeadLetter]
    malformed: int


Change = tuple[DeadLetter, DeadLetterRecord | None]  # an entry, and its new record or None


class DeadLetterBox(Protocol):
    """One user's flush dead letters, wherever they live."""

    @property
    def relative(self) -> str:
        """Where they are, as a flush result names it."""
        ...

    def exists(self) -> bool: ...

    def replaying(self) -> AbstractContextManager[bool]:
        """Held by the one replay of this user that may run at a time (False: another has it)."""
        ...

    def append(self, record: DeadLetterRecord, ctx: RuntimeContext | None = None) -> None: ...

    def read(self, owner: RuntimeContext) -> DeadLetterRead: ...

    def rewrite(self, changes: Iterable[Change]) -> None: ...

    def remove_user(self, owner: RuntimeContext) -> int: ...


class DeadLetterStore(Protocol):
    """Every user's flush dead letters: one user's box, and erasure's count and erase."""

    def box(self, ctx: RuntimeContext) -> DeadLetterBox: ...

    def count_user(self, ctx: RuntimeContext) -> int: ...

    def erase_user(self, ctx: RuntimeContext) -> int: ...


def letter_of(index: int, line: bytes, text: str, owner: RuntimeContext) -> DeadLetter:
    """The entry ``line`` holds (``ValueError`` when none): shared with the PostgreSQL table."""
    return _letter(index, line, text, owner)


def _letter(index: int, line: bytes, text: str, owner: RuntimeContext) -> DeadLetter:
    """The entry on ``line`` if it is one of ``owner``'s; else ``ValueError`` saying why."""
    record = DeadLetterRecord.from_dict(json.loads(text))
    if (record.tenant_id, record.user_id) != (owner.tenant_id, owner.user_id):
        raise ValueError("tenant_id/user_id do not match the folder it is in")
    return DeadLetter(index, line, record, owner.with_session(record.session_id))
