"""The consolidated memory documents of one scope owner: MEMORY.md and its snapshots.

Consolidation writes MEMORY.md (keeping the text it replaces as a snapshot,
``memory/archive/MEMORY.<stamp>.md``); the flush, the harness's system prompt, maintenance
(consolidated facts do not expire), the memory tools and erasure read or rewrite it. They all
go through ``MemoryDocs``, keyed by a ``RuntimeContext`` (its tenant and the scope owner it
addresses: the user, the agent or the tenant), never through paths, so where the documents
live is the composition root's choice alone:

- ``FilesMemoryDocs`` (``files.py``): files in the owner's workspace folder (same paths, same
  bytes, under the owner's long-term lock). The files backend reads MEMORY.md's
  bullets as facts, so with that backend the documents stay files: they are its
  human-readable memory.
- ``PostgresMemoryDocs`` (``postgres.py``): rows of one PostgreSQL table, for the Qdrant
  backend with replica state in PostgreSQL (``ReplicaStores.memory_docs``).

Names are the ones the memory tools show: ``MEMORY.md`` and ``memory/archive/MEMORY.<stamp>.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError

MEMORY_MD = "MEMORY.md"


SNAPSHOT_PREFIX = "memory/archive/MEMORY."


STAMP_FORMAT = "%Y%m%dT%H%M%S"


_SNAPSHOT = re.compile(r"memory/archive/MEMORY\.([0-9]{8}T[0-9]{6})\.md")


def snapshot_name(stamp: str) -> str:
    """The name of the snapshot taken at ``stamp`` (``STAMP_FORMAT``)."""
    return f"{SNAPSHOT_PREFIX}{stamp}.md"


def snapshot_stamp(name: str) -> str | None:
    """The stamp of a snapshot's name; None when ``name`` names no snapshot."""
    match = _SNAPSHOT.fullmatch(name)
    return match.group(1) if match else None


def is_memory_doc(name: str) -> bool:
    """Whether ``name`` is MEMORY.md or one of its snapshots (not a daily ledger)."""
    return name == MEMORY_MD or snapshot_stamp(name) is not None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The text a write replaces, to keep under ``stamp`` before it is overwritten."""

    stamp: str
    text: str

    def __post_init__(self) -> None:
        if snapshot_stamp(snapshot_name(self.stamp)) is None:
            raise InvalidInputError(
                f"snapshot stamp {self.stamp!r} is not YYYYMMDDTHHMMSS", code="invalid_snapshot"
            )


class MemoryDocs(Protocol):
    """Where the consolidated memory documents of every scope owner live. ``in_workspace``:
    they are files in the owner's folder (the memory tools then check their paths as files,
    links included)."""

    in_workspace: bool

    def read(self, ctx: RuntimeContext) -> str:
        """The owner's MEMORY.md; '' when there is none."""
        ...

    def read_named(self, ctx: RuntimeContext, name: str) -> str | None:
        """MEMORY.md or a snapshot by name; None when there is no such document."""
        ...

    def write(
        self,
        ctx: RuntimeContext,
        text: str,
        *,
        snapshot: Snapshot | None = None,
        check: bool = True,
    ) -> str | None:
        """Replace MEMORY.md by ``text`` atomically, keeping ``snapshot`` (when its text is
        not empty) first, in the same step. ``check``: refused (``UserErasedError``) for an
        erased user, under the lock an erase takes. Returns where the snapshot went."""
        ...

    def edit(self, ctx: RuntimeContext, change: Callable[[str], str | None]) -> None:
        """Rewrite an existing MEMORY.md as ``change`` says (None: leave it), under the lock
        writers take, so no consolidation is lost in between."""
        ...

    def snapshots(self, ctx: RuntimeContext) -> list[str]:
        """The names of the owner's snapshots, oldest first."""
        ...

    def write_snapshot(self, ctx: RuntimeContext, snapshot: Snapshot) -> str:
        """Keep ``snapshot`` (an import, a restore); returns where it went."""
        ...

    def count_user(self, ctx: RuntimeContext) -> int:
        """MEMORY.md (0 or 1) plus its snapshots."""
        ...

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete MEMORY.md and every snapshot of it; how many documents went."""
        ...
