"""Replay of failed flushes: the messages kept in ``dead-letters/flush.jsonl``, extracted again.

A flush that fails after its retries appends one JSON line per failure to the user's
dead-letter file (``MemoryFlushManager._fail``). For a ``pre_compaction`` or ``overflow``
failure that line is the only copy of the messages once compaction has run. Once the model
works again, ``replay_dead_letters`` sends each entry's messages through the flush's own
extraction and recording (``MemoryFlushManager.extract_and_record``: same prompt, batching,
retries and exact-hash dedup against MEMORY.md), then rewrites the file:

- an entry whose facts were recorded (or that held nothing worth keeping) is removed;
- an entry that fails again stays, with ``replay_attempts``, ``last_replay_error`` and
  ``last_replay_at`` updated (and only the messages still unrecorded, when some batches of a
  long entry went through);
- a line that is not a valid entry is kept byte for byte and counted as malformed;
- lines appended by a flush while the replay ran are kept: the replay holds the append lock
  only to read and to rewrite, and the rewrite re-reads the file under that lock and changes
  only the exact lines it replayed.

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
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from memory_service.context import RuntimeContext
from memory_service.facts import utcnow
from memory_service.fsutil import read_text, write_atomically
from memory_service.llm import require_model
from memory_service.messages import Msg
from memory_service.paths import UserPaths
from memory_service.pipeline.flush import DEAD_LETTERS, MemoryFlushManager
from memory_service.pipeline.scheduler import known_users
from memory_service.progress import Progress

log = logging.getLogger(__name__)

REPLAY_LOCK = ".flush.replay.lock"  # one replay per user at a time
LOCK_TIMEOUT_S = 30  # as ``_fail`` waits for the append lock
MAX_ERROR_CHARS = 500

OnEntries = Callable[[int], None]


# -- the file ------------------------------------------------------------------------------


def dead_letter_file(workspace: Path, ctx: RuntimeContext) -> Path:
    """The user's flush dead-letter file, checked to be inside the user's folder."""
    paths = UserPaths.of(workspace, ctx)
    return paths.inside(paths.dead_letters(DEAD_LETTERS))


def _append_lock(path: Path) -> FileLock:
    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)  # the lock ``_fail`` takes


def _read_lines(path: Path) -> list[str]:
    """The file's lines without their newlines. Split on ``\\n`` only: entries are written
    with ``ensure_ascii=False``, so a U+2028 inside a message must not split a line."""
    text = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One well-formed entry: its exact line (its identity in the file) and its messages."""

    index: int
    line: str
    entry: dict[str, Any]
    ctx: RuntimeContext  # the owner, with the entry's session
    messages: tuple[Msg, ...]

    @property
    def reason(self) -> str:
        return str(self.entry.get("reason") or "unknown")

    @property
    def message_keys(self) -> frozenset[str]:
        return frozenset(json.dumps(m.to_dict(), sort_keys=True) for m in self.messages)


def parse_dead_letter(index: int, line: str, owner: RuntimeContext) -> DeadLetter:
    """The entry on ``line``; ``ValueError`` (with why) when it is not one this user can
    replay: not JSON, another user's, no messages, or a message that does not load."""
    entry = json.loads(line)
    if not isinstance(entry, dict):
        raise ValueError("not a JSON object")
    if (entry.get("tenant_id"), entry.get("user_id")) != (owner.tenant_id, owner.user_id):
        raise ValueError("tenant_id/user_id do not match the folder it is in")
    raw = entry.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ValueError("no messages")
    try:
        messages = tuple(Msg.from_dict(m) for m in raw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"a message does not load: {exc!r}") from exc
    return DeadLetter(index, line, entry, owner.with_session(entry.get("session_id")), messages)


def _parse_all(lines: list[str], owner: RuntimeContext) -> tuple[list[DeadLetter], int]:
    """Well-formed entries and the count of malformed lines (blank lines are neither)."""
    letters: list[DeadLetter] = []
    malformed = 0
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            letters.append(parse_dead_letter(index, line, owner))
        except ValueError as exc:  # JSONDecodeError, InvalidInputError and InvalidIdError too
            malformed += 1
            log.warning("dead letter line %d of %s/%s kept as is: %s", index + 1, *_who(owner), exc)
    return letters, malformed


def _who(ctx: RuntimeContext) -> tuple[str, str]:
    return ctx.tenant_id, ctx.user_id


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


def list_dead_letters(workspace: Path, ctx: RuntimeContext) -> ReplayReport:
    """Count one user's entries by reason, and the malformed lines; no model involved."""
    report = ReplayReport(ctx.tenant_id, ctx.user_id)
    path = dead_letter_file(workspace, ctx)
    if not path.exists():
        return report
    with _append_lock(path):
        lines = _read_lines(path)
    letters, malformed = _parse_all(lines, ctx)
    report.counts.update(entries=len(letters), malformed=malformed)
    report.reasons.update(letter.reason for letter in letters)
    report.status = "listed"
    return report


def users_with_dead_letters(workspace: Path, tenant_id: str | None = None) -> list[RuntimeContext]:
    """Every (tenant, user) of the workspace with a non-empty flush dead-letter file. Dead
    letters live in the user's folder whatever the backend, so the folders are enough."""
    found = []
    for ctx in known_users(workspace, None):  # a dead-letter file needs the user's folder
        if tenant_id is not None and ctx.tenant_id != tenant_id:
            continue
        path = UserPaths.of(workspace, ctx).dead_letters(DEAD_LETTERS)
        if path.is_file() and path.stat().st_size > 0:
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
    path = dead_letter_file(manager.workspace, ctx)
    if not path.exists():
        return report
    replay_lock = FileLock(str(path.parent / REPLAY_LOCK), timeout=0)
    try:
        replay_lock.acquire()
    except Timeout:
        report.status, report.error = "busy", "another replay of this user is running"
        return report
    try:
        with _append_lock(path):
            lines = _read_lines(path)
        letters, malformed = _parse_all(lines, ctx)
        report.counts.update(entries=len(letters), malformed=malformed)
        report.reasons.update(letter.reason for letter in letters)
        changes = _replay(manager, letters, report, on_entries or (lambda _n: None))
        if changes:
            _rewrite(path, changes)
    finally:
        replay_lock.release()
    return _settle(report)


def _replay(
    manager: MemoryFlushManager,
    letters: list[DeadLetter],
    report: ReplayReport,
    on_entries: OnEntries,
) -> list[tuple[str, str | None]]:
    """Replay the entries no other entry covers, settle the covered ones by them; returns
    (exact line, its new line or None to drop) for every entry that changes."""
    covered_by = _covered_by(letters)
    succeeded: set[int] = set()
    changes: list[tuple[str, str | None]] = []
    for letter in letters:
        if covered_by[letter.index]:
            continue
        replacement = _replay_one(manager, letter, report)
        if replacement is None:
            succeeded.add(letter.index)
        changes.append((letter.line, replacement))
        on_entries(1)
    covered = [letter for letter in letters if covered_by[letter.index]]
    for letter in covered:
        if covered_by[letter.index] & succeeded:
            report.counts["covered"] += 1
            changes.append((letter.line, None))
        else:  # what covers it failed and stays in the file: this one stays too
            report.counts["failed"] += 1
    on_entries(len(covered))
    return changes


def _covered_by(letters: list[DeadLetter]) -> dict[int, set[int]]:
    """For each entry, the entries of the same session holding all its messages (more of
    them, or the same ones later in the file, so two equal entries do not cover each other)."""
    keys = {letter.index: letter.message_keys for letter in letters}
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
) -> str | None:
    """Send one entry; None when it is done with, else its updated line (kept in the file)."""
    try:
        result, rest = manager.extract_and_record(letter.ctx, letter.messages, reason="replay")
        error = result.error if result.status == "failed" else None
    except Exception as exc:  # noqa: BLE001 - one bad entry never stops the others
        log.exception("replay of a dead letter of %s/%s failed", *_who(letter.ctx))
        rest, error = list(letter.messages), f"{type(exc).__name__}: {exc}"
    if error is None:
        report.counts["replayed"] += 1
        report.counts["facts"] += sum(1 for f in result.facts if f.status != "duplicate")
        return None
    report.counts["failed"] += 1
    report.errors.append(str(error)[:MAX_ERROR_CHARS])
    return _json_line(_retried(letter.entry, rest, error))


def _retried(entry: Mapping[str, Any], rest: list[Msg], error: str) -> dict[str, Any]:
    """The entry after one more failed try; only the messages still unrecorded."""
    seqs = [m.seq for m in rest if m.seq is not None]
    return {
        **entry,
        "from_seq": min(seqs, default=entry.get("from_seq")),
        "through_seq": max(seqs, default=entry.get("through_seq")),
        "messages": [m.to_dict() for m in rest],
        "replay_attempts": int(entry.get("replay_attempts") or 0) + 1,
        "last_replay_error": str(error)[:MAX_ERROR_CHARS],
        "last_replay_at": utcnow().isoformat(),
    }


def _json_line(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False)


def _rewrite(path: Path, changes: Iterable[tuple[str, str | None]]) -> None:
    """Apply ``changes`` to the file as it is now: re-read under the append lock, so lines a
    flush appended meanwhile survive, and change each replayed line once (an identical copy
    of it elsewhere is its own entry). Atomic: a crash leaves the old file or the new one."""
    pending: dict[str, deque[str | None]] = {}
    for line, replacement in changes:
        pending.setdefault(line, deque()).append(replacement)
    with _append_lock(path):
        kept: list[str] = []
        for line in _read_lines(path):
            queue = pending.get(line)
            if queue:
                replacement = queue.popleft()
                if replacement is not None:
                    kept.append(replacement)
            elif line.strip():
                kept.append(line)
        write_atomically(path, "".join(line + "\n" for line in kept))


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
    total = sum(list_dead_letters(manager.workspace, ctx).counts["entries"] for ctx in targets)
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
