"""The flush's dead letters: what a flush that failed after its retries keeps for replay.

For a ``pre_compaction`` or ``overflow`` failure a letter (``record.DeadLetterRecord``) is the
only copy of the messages once compaction has run, so every implementation appends durably
before the flush reports the letter, keeps entries it cannot read (counted as malformed,
never dropped), and rewrites only the exact entries a replay hands back.

``DeadLetterBox`` (one user's letters) and ``DeadLetterStore`` (every user's, as the flush,
the replay and erasure see them) are the narrow interface of ``FilesDeadLetterStore``
(``files.py``: ``dead-letters/flush.jsonl``) and ``PostgresDeadLetterStore`` (``postgres.py``,
``MEMORY_STATE__BACKEND=postgres``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from memory_service.domain.context import RuntimeContext
from memory_service.stores.dead_letters.record import DeadLetterRecord

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
