"""Flush: durable facts out of a conversation, into long-term memory.

``MemoryFlushManager`` sends the messages the flush has not seen yet (everything after the
``AgentState.last_flushed_index`` watermark) to the memory model with the extraction prompt,
MEMORY.md riding along as read-only context. The model answers Markdown bullets, or
``NO_REPLY`` when nothing is worth keeping. A bullet may start with an annotation::

    - [preference|7|user.diet] The user is vegetarian.
    - [fact|10] The user is allergic to peanuts.
    - The user works at Acme.              (no annotation: kind fact, importance 5)

The annotation is ``[...]`` with ``|``-separated parts in any order, each optional: a kind
(fact, preference, event, procedure), an importance 1-10, and a key (a subject such as
``user.diet``; a newer fact with the same key supersedes the older one). A bracket that is not
a valid annotation stays part of the text. Bullets are cleaned (metadata comments, emphasis and
extra whitespace removed), exact duplicates dropped (within the reply and against MEMORY.md),
and the rest recorded through ``LongTermMemory.record`` (today's ledger in the files backend).

Three paths call it: after each agent call (``after_call``, governed by the ``FlushTrigger``),
and, as the ``ShortTermMemory`` flush callback, before compaction and on a context overflow.
A failed or malformed reply is retried (``MemorySettings.flush_retries``); if it still fails the
watermark stays where it was, so the next flush sends those messages again, and the messages
are appended to ``dead-letters/flush.jsonl`` in the user's folder and counted. Token usage of
every flush is added to the tenant's usage file. ``extract_and_record`` runs the same extraction
and recording on messages outside a session: ``pipeline/replay.py`` replays dead letters with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from indexing.hashing import content_hash
from memory_service.config import MemorySettings
from memory_service.context import RuntimeContext
from memory_service.errors import InvalidInputError, MemoryServiceError
from memory_service.facts import FACT_KINDS, Fact, RecordResult, parse_time, utcnow
from memory_service.fsutil import append_durably, read_text
from memory_service.llm import ChatModel, LlmBadResponseError, LlmError, Usage
from memory_service.longterm.base import LongTermMemory
from memory_service.longterm.ledger import parse_ledger
from memory_service.messages import MEMORY_TOOL_NAMES, Msg, estimate_tokens
from memory_service.paths import UserPaths
from memory_service.pipeline.consolidation import plain_memory
from memory_service.shortterm.compaction import render_line
from memory_service.shortterm.flush_hook import FlushReason
from memory_service.shortterm.state import AgentState
from memory_service.usage import UsageLedger

log = logging.getLogger(__name__)

NO_REPLY = "NO_REPLY"
EXTRA_KEY = "memory_flush"  # the flush's bookkeeping in AgentState.extra
DEAD_LETTERS = "flush"
TRANSCRIPT_SHARE = 0.5  # of the memory model's window, at most, per flush request
MIN_TRANSCRIPT_TOKENS = 512
MAX_CHARS_PER_MESSAGE = 2_000
MAX_CHARS_PER_TOOL_RESULT = 300  # transient tool output: a glimpse is enough
MAX_REPLY_IN_DEAD_LETTER = 4_000

DEFAULT_FLUSH_PROMPT = """\
You extract long-term memories from a conversation between a user and an AI assistant.
Keep only what will still matter in future conversations:
- stable facts about the user: identity, circumstances, health, relationships, work;
- preferences and dislikes;
- decisions that were made, with their reasons when given;
- commitments and plans: who will do what, and by when.
Do not keep small talk, greetings, questions that were fully answered, transient tool output,
or anything the assistant merely suggested. MEMORY.md, given below, is what is already
remembered. It is read-only context: do not repeat what it holds; write a memory only for
something new or changed.

Answer with one Markdown bullet per memory and nothing else:
- [kind|importance|key] The memory, as one self-contained sentence.
kind is fact, preference, event or procedure; importance is 1-10 (10: must never be
forgotten, such as an allergy; 1: trivia); key is an optional subject such as user.diet, given
when a newer memory should replace an older one on the same subject (leave it out when unsure:
"- [preference|6] ..."). Write in the third person ("The user ..."), in the language of the
conversation, with absolute dates where they are known.
If nothing is worth keeping, answer exactly NO_REPLY."""

_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,3}[.)])\s+(?P<body>.+?)\s*$")
_ANNOTATION = re.compile(r"^\[(?P<inner>[^\[\]\n]{0,300})\]\s*")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FENCE = re.compile(r"^\s*```")
_EMPHASIS = re.compile(r"\*\*|__")
_WS = re.compile(r"\s+")
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,255}")
_QUOTES = "\"'\u201c\u201d\u2018\u2019"


# -- parsing -------------------------------------------------------------------------------


def _annotation(inner: str) -> dict[str, Any] | None:
    """``kind|importance|key`` in any order, each optional; None if it is not one."""
    found: dict[str, Any] = {}
    parts = [p.strip() for p in inner.split("|")]
    for part in parts:
        if not part:
            continue
        if part.lower() in FACT_KINDS and "kind" not in found:
            found["kind"] = part.lower()
        elif part.isdigit() and "importance" not in found:
            found["importance"] = max(1, min(10, int(part)))
        elif _KEY.fullmatch(part) and "key" not in found and (len(parts) > 1 or "." in part):
            found["key"] = part
        else:
            return None
    return found or None


def clean_text(text: str) -> str:
    """A bullet's text without comments, emphasis, wrapping quotes or extra whitespace."""
    text = _EMPHASIS.sub("", _COMMENT.sub("", text))
    return _WS.sub(" ", text).strip().strip(_QUOTES).strip()


def parse_flush_reply(text: str) -> list[Fact]:
    """The facts in a flush reply; ``[]`` for ``NO_REPLY``. A reply with neither bullets nor
    ``NO_REPLY`` is malformed (``LlmBadResponseError``). Facts carry no ids yet."""
    lines = [line for line in (text or "").split("\n") if not _FENCE.match(line)]
    facts: list[Fact] = []
    bullets = 0
    for line in lines:
        match = _BULLET.match(line)
        if not match:
            continue
        bullets += 1
        body = match.group("body")
        meta: dict[str, Any] = {}
        annotated = _ANNOTATION.match(body)
        if annotated and (parsed := _annotation(annotated.group("inner"))) is not None:
            meta, body = parsed, body[annotated.end() :]
        cleaned = clean_text(body)
        if len(cleaned) < 3 or cleaned.upper().strip(".! ") == NO_REPLY:
            continue
        try:
            facts.append(Fact(text=cleaned, source="flush", **meta).validate())
        except InvalidInputError as exc:
            log.warning("flush bullet refused (%s): %.80r", exc.message, cleaned)
    if bullets == 0 and NO_REPLY not in (text or ""):
        shown = (text or "").strip()[:200]
        raise LlmBadResponseError(
            f"the flush reply has neither Markdown bullets nor {NO_REPLY}: {shown!r}"
        )
    return facts


def distinct(facts: Sequence[Fact], known_hashes: set[str]) -> list[Fact]:
    """``facts`` without exact duplicates of each other or of ``known_hashes``."""
    seen = set(known_hashes)
    out = []
    for fact in facts:
        digest = content_hash(fact.text)
        if digest not in seen:
            seen.add(digest)
            out.append(fact)
    return out


# -- results -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlushedFact:
    id: str
    text: str
    status: str  # created | duplicate | superseded
    kind: str
    importance: int
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "status": self.status,
            "kind": self.kind,
            "importance": self.importance,
            "key": self.key,
        }


@dataclass(slots=True)
class FlushResult:
    """What one flush did.

    ``status``: ``flushed`` (facts recorded), ``no_reply`` (nothing worth keeping),
    ``nothing_to_flush`` (no unflushed conversation), ``skipped`` (trigger, disabled or no
    model; ``detail`` says which), ``failed`` (retries exhausted; ``dead_letter`` names the
    file that holds the messages)."""

    reason: str
    status: str = "nothing_to_flush"
    facts: list[FlushedFact] = field(default_factory=list)
    through_seq: int | None = None  # watermark after the flush
    messages: int = 0  # conversation messages sent to the model
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    detail: str | None = None
    error: str | None = None
    dead_letter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "status": self.status,
            "facts": [f.to_dict() for f in self.facts],
            "through_seq": self.through_seq,
            "messages": self.messages,
            "attempts": self.attempts,
            "usage": self.usage.to_dict(),
            "detail": self.detail,
            "error": self.error,
            "dead_letter": self.dead_letter,
        }


@dataclass(slots=True)
class _Batch:
    lines: list[str]
    messages: list[Msg]  # every unflushed message the batch covers (sent or not)
    through_seq: int


@dataclass(slots=True)
class _Failure:
    """Why a run of batches stopped, and what it leaves unrecorded."""

    error: str | None
    facts: list[Fact]  # parsed from the failed batch's reply, if it got that far
    reply: str | None
    rest: list[Msg]  # the failed batch's messages and every later batch's


class FlushFailedError(MemoryServiceError):
    """A flush that failed after its retries; its messages are in a dead-letter file."""

    code = "flush_failed"
    http_status = 502


_collector: ContextVar[list[FlushResult] | None] = ContextVar("flush_collector", default=None)


# -- the manager ---------------------------------------------------------------------------


class MemoryFlushManager:
    """Flushes sessions of every tenant into ``longterm``. Also the ``FlushCallback`` of
    ``ShortTermMemory`` (``manager(state, ctx, reason)``)."""

    def __init__(
        self,
        longterm: LongTermMemory,
        model: ChatModel | None,
        workspace: Path,
        *,
        config: MemorySettings | None = None,
        usage: UsageLedger | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.longterm = longterm
        self.config = config or MemorySettings()
        self.model = model.with_model(self.config.model) if model is not None else None
        self.workspace = Path(workspace)
        self.usage = usage or UsageLedger(self.workspace)
        self.prompt = self.config.flush_prompt or DEFAULT_FLUSH_PROMPT
        self._clock = clock

    def __call__(self, state: AgentState, ctx: RuntimeContext, reason: str) -> FlushResult:
        """The ``FlushCallback``: a failed flush raises ``FlushFailedError`` (after its dead
        letter is written), so the compaction result reports ``flush_error``."""
        result = self.flush(state, ctx, reason)  # type: ignore[arg-type]
        if result.status == "failed":
            raise FlushFailedError(f"{result.error}; the messages are kept in {result.dead_letter}")
        return result

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[FlushResult]]:
        """Every flush run inside the block (on this thread, by any path) is appended to the
        yielded list: the harness reports flushes that ran inside ShortTermMemory."""
        results: list[FlushResult] = []
        token = _collector.set(results)
        try:
            yield results
        finally:
            _collector.reset(token)

    # -- entry points ---------------------------------------------------------------------

    def after_call(self, state: AgentState, ctx: RuntimeContext) -> FlushResult:
        """The post-call flush, if the trigger says so. The time of the last one is kept in
        ``state.extra`` so a throttle survives a restart (the state is stored)."""
        now = self._clock()
        last = parse_time(state.extra.get(EXTRA_KEY, {}).get("last_post_call_at"))
        if not self.config.flush_trigger.due(last, now):
            return self._report(FlushResult("post_call", "skipped", detail="trigger"))
        result = self.flush(state, ctx, "post_call")
        if result.status not in ("nothing_to_flush", "skipped"):
            state.extra.setdefault(EXTRA_KEY, {})["last_post_call_at"] = now.isoformat()
        return result

    def flush(self, state: AgentState, ctx: RuntimeContext, reason: FlushReason) -> FlushResult:
        """Flush ``state.unflushed()``; moves the watermark only past what was recorded."""
        result = FlushResult(reason, through_seq=state.last_flushed_index)
        if self.config.disable_memory_hooks:
            result.status, result.detail = "skipped", "disabled"
            return self._report(result)
        pending = state.unflushed()
        if not pending:
            return self._report(result)
        paths = UserPaths.of(self.workspace, ctx)
        memory_md, _ = memory_md_for_model(paths, self.config.memory_load_token_budget)
        batches = self._batches(pending, memory_md)
        if not batches:  # only instructions, hints or memory-tool output: nothing to extract
            state.mark_flushed(max(m.seq for m in pending if m.seq is not None))
            result.through_seq = state.last_flushed_index
            return self._report(result)
        if self.model is None:
            result.status, result.detail = "skipped", "no_model"
            if reason != "post_call":  # the messages are about to leave the state: keep them
                self._fail(result, ctx, paths, pending, "no LLM is configured for the flush")
            return self._report(self._account(result, ctx))

        def advance(batch: _Batch) -> None:
            state.mark_flushed(batch.through_seq)
            result.through_seq = state.last_flushed_index

        failure = self._record_batches(ctx, batches, memory_md, result, advance)
        if failure is not None:
            self._fail(
                result,
                ctx,
                paths,
                failure.rest,
                failure.error,
                facts=failure.facts,
                reply=failure.reply,
            )
        if result.status != "failed":
            result.status = "flushed" if result.facts else "no_reply"
        return self._report(self._account(result, ctx))

    def extract_and_record(
        self, ctx: RuntimeContext, messages: Sequence[Msg], reason: str = "replay"
    ) -> tuple[FlushResult, list[Msg]]:
        """Extract and record facts from ``messages`` outside any session state: the flush's
        own batching, retries and dedup, but no watermark and no new dead letter (the caller
        keeps what failed). Returns the result and the messages not recorded (the failed
        batch onward; ``[]`` when everything went through). Usage is counted under
        ``<reason>`` purposes (``flush_replay``...) so replays are told apart from flushes."""
        result = FlushResult(reason)
        if self.model is None:
            result.status, result.detail = "skipped", "no_model"
            return result, list(messages)
        # batching needs positions; messages from outside a session may lack them
        messages = [m if m.seq is not None else m.with_seq(i) for i, m in enumerate(messages)]
        paths = UserPaths.of(self.workspace, ctx)
        memory_md, _ = memory_md_for_model(paths, self.config.memory_load_token_budget)
        batches = self._batches(messages, memory_md)
        if not batches:
            return result, []
        failure = self._record_batches(ctx, batches, memory_md, result, lambda _batch: None)
        if failure is not None:
            result.status, result.error = "failed", failure.error
        else:
            result.status = "flushed" if result.facts else "no_reply"
        self._account(result, ctx, purpose=f"flush_{reason}")
        return result, failure.rest if failure is not None else []

    def _record_batches(
        self,
        ctx: RuntimeContext,
        batches: Sequence[_Batch],
        memory_md: str,
        result: FlushResult,
        advance: Callable[[_Batch], None],
    ) -> _Failure | None:
        """Extract and record batch after batch, calling ``advance`` after each recorded one;
        stops at the first failure (later batches are not sent: their messages stay pending).
        Exact duplicates of MEMORY.md and of earlier batches are dropped before ``record``."""
        known = {content_hash(f.text) for f in _bullets(memory_md)}
        for index, batch in enumerate(batches):
            facts, error, reply = self._extract(batch, memory_md, result)
            if error is None:
                try:
                    fresh = distinct(facts, known)
                    recorded = self.longterm.record(ctx, fresh) if fresh else []
                except (MemoryServiceError, OSError) as exc:
                    error = f"recording failed: {type(exc).__name__}: {exc}"
                else:
                    known.update(content_hash(f.text) for f in fresh)
                    result.facts += _flushed(fresh, recorded)
                    advance(batch)
                    continue
            rest = [m for b in batches[index:] for m in b.messages]
            return _Failure(error, list(facts), reply, rest)
        return None

    # -- steps ----------------------------------------------------------------------------

    def _batches(self, pending: Sequence[Msg], memory_md: str) -> list[_Batch]:
        """Transcript lines in batches that fit the memory model's window."""
        window = self.model.context_window if self.model is not None else 128_000
        budget = int(window * TRANSCRIPT_SHARE) - estimate_tokens(self.prompt)
        budget = max(MIN_TRANSCRIPT_TOKENS, budget - estimate_tokens(memory_md))
        batches: list[_Batch] = []
        lines: list[str] = []
        covered: list[Msg] = []
        used = 0
        for message in pending:
            line = transcript_line(message)
            cost = estimate_tokens(line) if line else 0
            if line and lines and used + cost > budget:
                batches.append(_Batch(lines, covered, _last_seq(covered)))
                lines, covered, used = [], [], 0
            covered.append(message)
            if line:
                lines.append(line)
                used += cost
        if lines:
            batches.append(_Batch(lines, covered, _last_seq(covered)))
        elif batches:  # trailing messages with nothing to say ride with the last batch
            batches[-1].messages += covered
            batches[-1].through_seq = _last_seq(batches[-1].messages)
        return batches

    def _extract(
        self, batch: _Batch, memory_md: str, result: FlushResult
    ) -> tuple[list[Fact], str | None, str | None]:
        """Ask the model, retrying failures; (facts, error, last reply text)."""
        assert self.model is not None
        request = [Msg.system(self.prompt), Msg.user(flush_request(batch.lines, memory_md))]
        result.messages += sum(1 for m in batch.messages if transcript_line(m))
        error: str | None = None
        reply_text: str | None = None
        for attempt in range(1 + self.config.flush_retries):
            result.attempts += 1
            try:
                reply = self.model.complete(request, temperature=0.0)
            except LlmError as exc:
                error = f"{exc.code}: {exc.message}"
            else:
                result.usage = result.usage + reply.usage
                reply_text = reply.text
                try:
                    return parse_flush_reply(reply.text), None, reply_text
                except LlmBadResponseError as exc:
                    error = f"{exc.code}: {exc.message}"
            log.warning("flush attempt %d failed: %s", attempt + 1, error)
        return [], error, reply_text

    def _fail(
        self,
        result: FlushResult,
        ctx: RuntimeContext,
        paths: UserPaths,
        messages: Sequence[Msg],
        error: str | None,
        *,
        facts: Sequence[Fact] = (),
        reply: str | None = None,
    ) -> None:
        """Keep what could not be flushed: a line in the user's dead-letter file."""
        result.status, result.error = "failed", error
        seqs = [m.seq for m in messages if m.seq is not None]
        entry = {
            "at": self._clock().isoformat(),
            "tenant_id": ctx.tenant_id,
            "user_id": ctx.user_id,
            "session_id": ctx.session_id,
            "reason": result.reason,
            "error": error,
            "attempts": result.attempts,
            "from_seq": min(seqs, default=None),
            "through_seq": max(seqs, default=None),
            "messages": [m.to_dict() for m in messages],
            "facts": [f.text for f in facts],
            "reply": (reply or "")[:MAX_REPLY_IN_DEAD_LETTER] or None,
        }
        path = paths.inside(paths.dead_letters(DEAD_LETTERS))
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=30):
            append_durably(path, json.dumps(entry, ensure_ascii=False) + "\n")
        result.dead_letter = str(path.relative_to(paths.root.resolve()))
        log.error(
            "flush of %s/%s/%s failed (%s); %d messages kept in %s",
            ctx.tenant_id,
            ctx.user_id,
            ctx.session_id,
            error,
            len(messages),
            path,
        )

    def _account(
        self, result: FlushResult, ctx: RuntimeContext, *, purpose: str = "flush"
    ) -> FlushResult:
        """Tokens and outcome counters, per tenant, under ``purpose`` (``flush``, or
        ``flush_replay`` for a replayed dead letter); a usage-file problem never fails a flush."""
        if not result.attempts and result.status != "failed":
            return result
        counters = {
            f"{purpose}_runs": 1,
            f"{purpose}_facts_created": sum(1 for f in result.facts if f.status != "duplicate"),
            f"{purpose}_failures": int(result.status == "failed"),
            f"{purpose}_dead_letters": int(result.dead_letter is not None),
        }
        tokens = {purpose: result.usage} if result.attempts else {}
        try:
            self.usage.record(ctx.tenant_id, tokens=tokens, counters=counters)
        except (OSError, TimeoutError) as exc:
            log.warning("could not record flush usage for %s: %s", ctx.tenant_id, exc)
        return result

    @staticmethod
    def _report(result: FlushResult) -> FlushResult:
        collected = _collector.get()
        if collected is not None:
            collected.append(result)
        return result


# -- helpers -------------------------------------------------------------------------------


def transcript_line(message: Msg) -> str | None:
    """How a message appears in the flush transcript; None for what carries no new facts
    (instructions, hints, summaries, and the memory tools' own output)."""
    if message.role == "system" or message.mark in ("hint", "summary"):
        return None
    if message.role == "tool":
        if message.name in MEMORY_TOOL_NAMES:
            return None
        return render_line(message, MAX_CHARS_PER_TOOL_RESULT)
    if not message.content.strip() and not message.tool_calls:
        return None
    return render_line(message, MAX_CHARS_PER_MESSAGE)


def flush_request(lines: Sequence[str], memory_md: str) -> str:
    return (
        '<memory_md read_only="true">\n'
        + (memory_md or "(empty)")
        + "\n</memory_md>\n\n<conversation>\n"
        + "\n".join(lines)
        + "\n</conversation>\n\n"
        + f"Write the new memories as bullets now, or {NO_REPLY}."
    )


def memory_md_for_model(paths: UserPaths, budget: int) -> tuple[str, str]:
    """MEMORY.md as a model reads it (no metadata comments): (what fits ``budget`` tokens,
    cut at a line boundary; the whole text)."""
    whole = plain_memory(read_text(paths.memory_md)).strip()
    return cut_to_tokens(whole, budget), whole


def cut_to_tokens(text: str, budget: int) -> str:
    """``text`` cut at a line boundary to about ``budget`` tokens."""
    if estimate_tokens(text) <= budget:
        return text
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        cost = estimate_tokens(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


def _bullets(markdown: str) -> list[Fact]:
    return [line.fact for line in parse_ledger(markdown, default_created_at=None)]


def _last_seq(messages: Sequence[Msg]) -> int:
    return max(m.seq for m in messages if m.seq is not None)


def _flushed(facts: Sequence[Fact], results: Sequence[RecordResult]) -> list[FlushedFact]:
    return [
        FlushedFact(r.id, f.text, r.status, f.kind, f.importance, f.key)
        for f, r in zip(facts, results, strict=True)
    ]
