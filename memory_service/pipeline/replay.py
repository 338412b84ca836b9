"""Replay of failed flushes: the messages kept in ``dead-letters/flush.jsonl``, extracted again.

A flush that fails after its retries appends one JSON line per failure to the user's
dead-letter file (``stores/dead_letters/files.py`` alone reads and writes it). For a
``pre_compaction`` or ``overflow`` failure that line is the only copy of the messages once
compaction has run. Once the model works again, ``replay_dead_letters`` sends each entry's
messages through the flush's own extraction and recording
(``MemoryFlushManager.extract_and_record``: same prompt, batching, retries and exact-hash dedup
against MEMORY.md), then rewrites the file:

- an entry whose facts were recorded (or that held nothing worth keeping) is removed;
- an entry that fails again stays, with ``replay_attempts``, ``last_replay_error`` and
  ``last_replay_at`` updated (and only the messages still unrecorded, when some batches of a
  long entry went through);
- a line that is not a valid entry is kept byte for byte and counted as malformed;
- lines appended by a flush while the replay ran are kept: the replay holds the append lock
  only to read and to rewrite, and the rewrite re-reads the file under that lock and changes
  only the exact lines it replayed (``FilesDeadLetterBox.rewrite``).

With ``MEMORY_STATE__BACKEND=postgres`` the letters are rows
(``stores/dead_letters/postgres.py``) behind the same ``DeadLetterBox``: the flush manager's
``dead_letters`` store says which, so a replay from any replica sees every replica's letters,
and two replicas never replay one user at once.

Overlapping entries are common: while the model is down every post-call flush fails and
re-sends everything since the watermark, so each entry holds the previous one's messages and
more. An entry whose messages are all inside another entry of the same session is not sent to
the model; it is removed when an entry holding it was replayed. That is safe from the file
alone: the larger entry carried every one of those messages to the model.

Replaying an entry whose messages were later flushed by a healthy post-call flush (the
watermark stays after a failure, so the next flush re-sends them) cannot be told from the file,
so it is replayed. That costs a model call and is otherwise harmless: the same fact text is an
exact duplicate (dropped against MEMORY.md, or ``duplicate`` in ``record``), and a paraphrase
is a near-duplicate that maintenance merges (or a newer fact with the same key supersedes).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import utcnow
from memory_service.domain.paths import OwnerPaths
from memory_service.llm import require_model
from memory_service.observe.progress import Progress
from memory_service.observe.telemetry import sink
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.pipeline.scheduler import known_users
from memory_service.stores.dead_letters import (
    Change,
    DeadLetter,
    DeadLetterRead,
    DeadLetterStore,
)
from memory_service.stores.dead_letters.files import FilesDeadLetterStore, has_dead_letters
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.user_data import ListsUsers, users_of

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500

OnEntries = Callable[[int], None]


def _who(ctx: RuntimeContext) -> tuple[str, str]:
    return ctx.tenant_id, ctx.user_id


def _message_keys(letter: DeadLetter) -> frozenset[str]:
    return frozenset(json.dumps(m.to_dict(), sort_keys=True) for m in letter.record.messages)


# -- reports -------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayReport:
    """One user's dead letters: listed (``dry_run``) or replayed.

    ``status``: ``listed``; ``empty`` (no entries); ``replayed`` (nothing left in the file);
    ``failed`` (an entry failed again, or the user's replay broke: ``error``); ``malformed``
    (only lines that cannot be replayed are left); ``busy`` (another replay of this user
    runs). Counts: ``entries`` well-formed; ``replayed`` sent and recorded; ``covered`` removed
    without a model call because a replayed entry held all their messages; ``failed`` kept;
    ``malformed`` lines kept as they were; ``facts`` created."""

    tenant_id: str
    user_id: str
    status: str = "empty"
    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def clean(self) -> bool:
        """Nothing is left to replay (the exit code is 0 only when every report is)."""
        return self.status in ("empty", "replayed", "listed")

    def to_dict(self) -> dict[str, Any]:
        names = ("entries", "replayed", "covered", "failed", "malformed", "facts")
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "status": self.status,
            "counts": {name: self.counts[name] for name in names},
            "reasons": dict(sorted(self.reasons.items())),
            "errors": list(self.errors),
            "error": self.error,
        }


def _settle(report: ReplayReport) -> ReplayReport:
    if report.error or report.counts["failed"]:
        report.status = "failed"
    elif report.counts["malformed"]:
        report.status = "malformed"
    elif report.counts["entries"]:
        report.status = "replayed"
    return report


# -- listing -------------------------------------------------------------------------------


def list_dead_letters(
    workspace: Path, ctx: RuntimeContext, store: DeadLetterStore | None = None
) -> ReplayReport:
    """Count one user's entries by reason, and the malformed lines; no model involved.
    ``store``: where the letters live (default: the workspace's files)."""
    report = ReplayReport(ctx.tenant_id, ctx.user_id)
    letters = (store or FilesDeadLetterStore(workspace)).box(ctx)
    if not letters.exists():
        return report
    _count(report, letters.read(ctx))
    report.status = "listed"
    return report


def _count(report: ReplayReport, read: DeadLetterRead) -> None:
    report.counts.update(entries=len(read.letters), malformed=read.malformed)
    report.reasons.update(letter.record.reason for letter in read.letters)


def users_with_dead_letters(
    workspace: Path, tenant_id: str | None = None, store: DeadLetterStore | None = None
) -> list[RuntimeContext]:
    """Every (tenant, user) with flush dead letters: the rows of a store that lists them
    (PostgreSQL), else the workspace's non-empty dead-letter files (in the users' folders
    whatever the long-term backend, so the folders are enough)."""
    if isinstance(store, ListsUsers):
        return users_of(store, tenant_id)
    found = []
    for ctx in known_users(workspace, None):  # a dead-letter file needs the user's folder
        if tenant_id is not None and ctx.tenant_id != tenant_id:
            continue
        if has_dead_letters(OwnerPaths.of(workspace, ctx)):
            found.append(ctx)
    return found


# -- replaying -----------------------------------------------------------------------------


def replay_dead_letters(
    manager: MemoryFlushManager, ctx: RuntimeContext, *, on_entries: OnEntries | None = None
) -> ReplayReport:
    """Replay one user's dead letters (see the module docstring); ``on_entries(n)`` is told
    each time ``n`` entries are settled, for progress. Needs the manager's model."""
    require_model(manager.model, "replaying dead letters")
    report = ReplayReport(ctx.tenant_id, ctx.user_id)
    letters = manager.dead_letters.box(ctx)
    if not letters.exists():
        return report
    with letters.replaying() as alone:
        if not alone:
            report.status, report.error = "busy", "another replay of this user is running"
            return report
        read = letters.read(ctx)
        _count(report, read)
        changes = _replay(manager, read.letters, report, on_entries or (lambda _n: None))
        if changes:
            letters.rewrite(changes)
    return _settle(report)


def _replay(
    manager: MemoryFlushManager,
    letters: list[DeadLetter],
    report: ReplayReport,
    on_entries: OnEntries,
) -> list[Change]:
    """Replay the entries no other entry covers, settle the covered ones by them; returns
    (entry, its new record or None to drop it) for every entry that changes."""
    covered_by = _covered_by(letters)
    succeeded: set[int] = set()
    changes: list[Change] = []
    for letter in letters:
        if covered_by[letter.index]:
            continue
        replacement = _replay_one(manager, letter, report)
        if replacement is None:
            succeeded.add(letter.index)
        changes.append((letter, replacement))
        on_entries(1)
    covered = [letter for letter in letters if covered_by[letter.index]]
    for letter in covered:
        if covered_by[letter.index] & succeeded:
            report.counts["covered"] += 1
            changes.append((letter, None))
        else:  # what covers it failed and stays in the file: this one stays too
            report.counts["failed"] += 1
    on_entries(len(covered))
    return changes


def _covered_by(letters: list[DeadLetter]) -> dict[int, set[int]]:
    """For each entry, the entries of the same session holding all its messages (more of
    them, or the same ones later in the file, so two equal entries do not cover each other)."""
    keys = {letter.index: _message_keys(letter) for letter in letters}
    out: dict[int, set[int]] = {}
    for a in letters:
        out[a.index] = {
            b.index
            for b in letters
            if b.index != a.index
            and b.ctx.session_id == a.ctx.session_id
            and keys[a.index] <= keys[b.index]
            and (keys[a.index] != keys[b.index] or b.index > a.index)
        }
    return out


def _replay_one(
    manager: MemoryFlushManager, letter: DeadLetter, report: ReplayReport
) -> DeadLetterRecord | None:
    """Send one entry; None when it is done with, else its updated record (kept in the file)."""
    messages = letter.record.messages
    try:
        result, rest = manager.extract_and_record(letter.ctx, messages, reason="replay")
        error = result.error if result.status == "failed" else None
    except Exception as exc:  # noqa: BLE001 - one bad entry never stops the others
        log.exception("replay of a dead letter of %s/%s failed", *_who(letter.ctx))
        rest, error = list(messages), f"{type(exc).__name__}: {exc}"
    sink().pipeline("replay", "ok" if error is None else "failed")
    if error is None:
        report.counts["replayed"] += 1
        report.counts["facts"] += result.facts_created
        return None
    report.counts["failed"] += 1
    report.errors.append(str(error)[:MAX_ERROR_CHARS])
    return letter.record.after_replay_failure(rest, str(error)[:MAX_ERROR_CHARS], utcnow())


def replay_all(
    manager: MemoryFlushManager,
    contexts: Iterable[RuntimeContext],
    *,
    progress: bool = True,
) -> list[ReplayReport]:
    """Replay each user in turn, with progress by entry; one user's failure never stops the
    others. No model: ``LlmNotConfiguredError`` before anything is read."""
    require_model(manager.model, "replaying dead letters")
    targets = list(contexts)
    store = manager.dead_letters
    total = sum(
        list_dead_letters(manager.workspace, ctx, store).counts["entries"] for ctx in targets
    )
    reports = []
    with Progress(total, "dead-letter replay", enabled=progress) as bar:
        for ctx in targets:
            bar.stage(f"{ctx.tenant_id}/{ctx.user_id}")
            try:
                reports.append(replay_dead_letters(manager, ctx, on_entries=bar.update))
            except Exception as exc:  # noqa: BLE001 - reported per user, never fatal
                log.exception("dead-letter replay failed for %s/%s", *_who(ctx))
                reports.append(ReplayReport(*_who(ctx), status="failed", error=str(exc)))
    return reports
