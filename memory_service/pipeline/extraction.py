"""Extraction: the memory model reads a transcript and answers the facts worth keeping.

The model gets the extraction prompt, then MEMORY.md (read-only context) and one transcript
batch. It answers Markdown bullets, or ``NO_REPLY`` when nothing is worth keeping. A bullet may
start with an annotation::

    - [preference|7|user.diet] The user is vegetarian.
    - [fact|10] The user is allergic to peanuts.
    - The user works at Acme.              (no annotation: kind fact, importance 5)

The annotation is ``[...]`` with ``|``-separated parts in any order, each optional: a kind
(fact, preference, event, procedure, or the memory types episodic, factual, procedural,
semantic that stand for them), an importance 1-10, a confidence (a decimal such as ``0.9``,
kept within 0.7-0.9; without one a fact the flush extracts gets 0.8: what is taken from a
conversation is less sure than what a person records: docs/decisions.md), and a key
(a subject such as ``user.diet``; a newer fact with the same key supersedes the older one).
A bracket that is not a valid annotation stays part of the text.

Provenance: the transcript numbers its messages (``#12 [user] ...``) and a bullet ends with the
numbers it came from, ``- [fact|7|user.diet] The user is vegetarian. (#12, #14)``. The fact's
``source`` is then those messages: the session, their numbers and their text (cut to
``MAX_SOURCE_TEXT_BYTES``). A citation is never an error: numbers outside the batch are
ignored, and a bullet with no valid number (none, ``(#x)``, ``(#99)`` for a batch of 3) gets
the whole batch as its source, numbers only: the text of a whole span would match every word
of the conversation. Bullets are cleaned (metadata comments, emphasis and
extra whitespace removed), exact duplicates dropped (within the reply and against MEMORY.md
and today's ledger, which the model also reads),
and the rest recorded through ``LongTermMemory.record`` (today's ledger in the files backend).
A failed or malformed reply is retried; what to do when it still fails is the caller's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from indexing.hashing import content_hash
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError, MemoryServiceError, UserErasedError
from memory_service.domain.facts import FACT_KINDS, KIND_ALIASES, Fact, Source, clip_source_text
from memory_service.domain.limits import MAX_PAGE_SIZE, MAX_SOURCE_MESSAGES
from memory_service.domain.messages import Msg, estimate_tokens
from memory_service.domain.redaction import SensitiveDataError
from memory_service.llm import ChatModel, LlmBadResponseError, LlmError
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.flush_result import FlushedFact, FlushResult
from memory_service.pipeline.memory_md import known_hashes
from memory_service.pipeline.transcript import (
    DEFAULT_WINDOW,
    TranscriptBatch,
    batch_transcript,
    transcript_budget,
)

log = logging.getLogger(__name__)

NO_REPLY = "NO_REPLY"
MAX_TODAY_SCAN = 10_000  # facts read to find the ones recorded today
# A fact taken from a conversation: 0.7-0.9, 0.8 unless the model says (docs/decisions.md)
EXTRACTED_CONFIDENCE = 0.8
EXTRACTED_RANGE = (0.7, 0.9)

DEFAULT_FLUSH_PROMPT = """\
You extract long-term memories from a conversation between a user and an AI assistant.
Keep only what will still matter in future conversations:
- stable facts about the user: identity, circumstances, health, relationships, work;
- preferences and dislikes;
- decisions that were made, with their reasons when given;
- commitments and plans: who will do what, and by when;
- the people the user works with: their roles, and how their team or organisation is set up.
Do not keep small talk, greetings, questions that were fully answered, transient tool output,
or anything the assistant merely suggested. MEMORY.md and today's ledger (the memories
already recorded today), given below, are what is already remembered. Both are read-only
to you: MEMORY.md is rewritten only by consolidation, and the ledger is append-only: it only
grows, by the bullets you answer with. Do not repeat what they hold; write a memory only for
something new or changed.

The conversation's messages are numbered (#12 [user] ...). Answer with one Markdown bullet
per memory and nothing else, each ending with the numbers of the messages it comes from:
- [kind|importance|confidence|key] The memory, as one self-contained sentence. (#12, #14)
kind is fact, preference, event or procedure; importance is 1-10 (10: must never be
forgotten, such as an allergy; 1: trivia); confidence is optional, 0.7-0.9 (0.9: the user
said it plainly; 0.7: you inferred it); key is an optional subject such as user.diet, given
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
# a trailing "(#12, #14)", before or after the sentence's final stop
_CITATION = re.compile(r"\s*\((?P<refs>\s*#[^()\n]{0,200})\)\s*(?P<stop>[.!?]?)\s*$")
_CITED_NUMBER = re.compile(r"#\s*(\d{1,9})\b")
_CONFIDENCE = re.compile(r"[01]?\.\d{1,6}")


# -- the request and the reply -------------------------------------------------------------


def flush_request(lines: Sequence[str], memory_md: str, today: str = "") -> str:
    """The user message of one extraction request: MEMORY.md, today's ledger, then the
    transcript."""
    return (
        '<memory_md read_only="true">\n'
        + (memory_md or "(empty)")
        + '\n</memory_md>\n\n<today_ledger read_only="true">\n'
        + (today or "(nothing recorded today)")
        + "\n</today_ledger>\n\n<conversation>\n"
        + "\n".join(lines)
        + "\n</conversation>\n\n"
        + f"Write the new memories as bullets now, or {NO_REPLY}."
    )


def _annotation(inner: str) -> dict[str, Any] | None:
    """``kind|importance|confidence|key`` in any order, each optional; None if it is not
    one."""
    found: dict[str, Any] = {}
    parts = [p.strip() for p in inner.split("|")]
    low, high = EXTRACTED_RANGE
    for part in parts:
        if not part:
            continue
        kind = part.lower()
        if (kind in FACT_KINDS or kind in KIND_ALIASES) and "kind" not in found:
            found["kind"] = KIND_ALIASES.get(kind, kind)
        elif part.isdigit() and "importance" not in found:
            found["importance"] = max(1, min(10, int(part)))
        elif _CONFIDENCE.fullmatch(part) and "confidence" not in found:
            found["confidence"] = max(low, min(high, float(part)))
        elif _KEY.fullmatch(part) and "key" not in found and (len(parts) > 1 or "." in part):
            found["key"] = part
        else:
            return None
    return found or None


def clean_text(text: str) -> str:
    """A bullet's text without comments, emphasis, wrapping quotes or extra whitespace."""
    text = _EMPHASIS.sub("", _COMMENT.sub("", text))
    return _WS.sub(" ", text).strip().strip(_QUOTES).strip()


@dataclass(frozen=True, slots=True)
class Span:
    """What one flush request showed the model: its session and, per numbered message, what
    the message said (the source a bullet may cite)."""

    session_id: str | None = None
    said: Mapping[int, str] = field(default_factory=dict)

    def source(self, cited: Sequence[int]) -> Source:
        """The source of a bullet citing ``cited``: the valid numbers' messages, or (none
        valid) the whole span by number."""
        valid = sorted({n for n in cited if n in self.said})
        if valid:
            spoken = clip_source_text(" ".join(self.said[n] for n in valid))
            return Source(
                "flush", self.session_id, tuple(valid[:MAX_SOURCE_MESSAGES]), spoken or None
            )
        return Source("flush", self.session_id, tuple(sorted(self.said)[:MAX_SOURCE_MESSAGES]))


def split_citation(body: str) -> tuple[str, list[int]]:
    """A bullet's text without its trailing ``(#n, ...)`` citation, and the numbers cited
    (``[]`` for no citation or a malformed one, which is dropped from the text all the same)."""
    match = _CITATION.search(body)
    if not match:
        return body, []
    numbers = [int(n) for n in _CITED_NUMBER.findall(match.group("refs"))]
    return body[: match.start()] + match.group("stop"), numbers


def parse_flush_reply(
    text: str, span: Span | None = None, *, empty_is_nothing: bool = False
) -> list[Fact]:
    """The facts in a flush reply; ``[]`` for ``NO_REPLY`` (and, with ``empty_is_nothing``: a
    custom prompt that never asks for ``NO_REPLY``, for a blank reply). Any other reply with
    neither bullets nor ``NO_REPLY`` is malformed (``LlmBadResponseError``). Facts carry no
    ids yet; each has the ``source`` its citation names within ``span`` (origin ``flush``
    only, without a span)."""
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
        body, cited = split_citation(body)
        cleaned = clean_text(body)
        if len(cleaned) < 3 or cleaned.upper().strip(".! ") == NO_REPLY:
            continue
        source = span.source(cited) if span is not None else Source("flush")
        meta.setdefault("confidence", EXTRACTED_CONFIDENCE)
        try:
            facts.append(Fact(text=cleaned, source=source, **meta).validate())
        except InvalidInputError as exc:
            # the bullet's text is the user's: the log names the reason and the size only
            log.warning("flush bullet refused (%s, %d characters)", exc.code, len(cleaned))
    if empty_is_nothing and not (text or "").strip():
        return facts
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


def todays_ledger(
    longterm: LongTermMemory, ctx: RuntimeContext, now: datetime, budget_tokens: int
) -> str:
    """The user's active facts recorded on ``now``'s (UTC) day, as bullets, newest kept
    within ``budget_tokens``: what the flush must not write again. At most
    ``MAX_TODAY_SCAN`` facts are read."""
    day = now.astimezone(UTC).date()
    today: list[Fact] = []
    cursor: str | None = None
    scanned = 0
    while scanned < MAX_TODAY_SCAN:
        page = longterm.list(ctx, limit=MAX_PAGE_SIZE, cursor=cursor)
        scanned += len(page.items)
        today += [
            f for f in page.items if f.created_at and f.created_at.astimezone(UTC).date() == day
        ]
        cursor = page.next_cursor
        if cursor is None:
            break
    today.sort(key=lambda f: f.created_at or now, reverse=True)
    lines: list[str] = []
    used = 0
    for fact in today:
        line = f"- {fact.text}"
        used += estimate_tokens(line)
        if used > budget_tokens:
            break
        lines.append(line)
    return "\n".join(reversed(lines))


# -- extracting and recording --------------------------------------------------------------


@dataclass(slots=True)
class ExtractionFailure:
    """Why a run of batches stopped, and what it leaves unrecorded."""

    error: str | None
    facts: list[Fact]  # parsed from the failed batch's reply, if it got that far
    reply: str | None
    rest: list[Msg]  # the failed batch's messages and every later batch's


class Extractor:
    """Sends transcript batches to the memory model and records the facts it answers."""

    def __init__(
        self, longterm: LongTermMemory, model: ChatModel | None, *, prompt: str, retries: int
    ) -> None:
        self.longterm = longterm
        self.model = model
        self.prompt = prompt
        self.retries = retries

    def batches(
        self, messages: Sequence[Msg], memory_md: str, today: str = ""
    ) -> list[TranscriptBatch]:
        """Transcript lines in batches that fit the memory model's window."""
        window = self.model.context_window if self.model is not None else DEFAULT_WINDOW
        context = f"{memory_md}\n{today}"
        return batch_transcript(messages, transcript_budget(window, self.prompt, context))

    def record(
        self,
        ctx: RuntimeContext,
        batches: Sequence[TranscriptBatch],
        memory_md: str,
        result: FlushResult,
        advance: Callable[[TranscriptBatch], None],
        today: str = "",
    ) -> ExtractionFailure | None:
        """Extract and record batch after batch, calling ``advance`` after each recorded one;
        stops at the first failure (later batches are not sent: their messages stay pending).
        Exact duplicates of MEMORY.md, of today's ledger and of earlier batches are dropped
        before ``record``."""
        known = known_hashes(memory_md) | known_hashes(today)
        for index, batch in enumerate(batches):
            span = Span(ctx.session_id, batch.said)
            facts, error, reply = self._extract(batch, memory_md, today, result, span)
            if error is None:
                try:
                    fresh = distinct(facts, known)
                    recorded = self.longterm.record(ctx, fresh) if fresh else []
                except UserErasedError:
                    raise  # the user was erased meanwhile: nothing to keep, no dead letter
                except SensitiveDataError as exc:  # refuse: the dead letter keeps no reply
                    error, facts, reply = f"recording failed: {exc.message}", [], None
                except (MemoryServiceError, OSError) as exc:
                    error = f"recording failed: {type(exc).__name__}: {exc}"
                else:
                    known.update(content_hash(f.text) for f in fresh)
                    result.facts += FlushedFact.pair(fresh, recorded)
                    advance(batch)
                    continue
            rest = [m for b in batches[index:] for m in b.messages]
            return ExtractionFailure(error, list(facts), reply, rest)
        return None

    def _extract(
        self,
        batch: TranscriptBatch,
        memory_md: str,
        today: str,
        result: FlushResult,
        span: Span,
    ) -> tuple[list[Fact], str | None, str | None]:
        """Ask the model, retrying failures; (facts, error, last reply text)."""
        assert self.model is not None
        prompt = flush_request(batch.lines, memory_md, today)
        request = [Msg.system(self.prompt), Msg.user(prompt)]
        result.messages += len(batch.lines)
        error: str | None = None
        reply_text: str | None = None
        for attempt in range(1 + self.retries):
            result.attempts += 1
            try:
                reply = self.model.complete(request, temperature=0.0)
            except LlmError as exc:
                error, code = f"{exc.code}: {exc.message}", exc.code
            else:
                result.usage = result.usage + reply.usage
                reply_text = reply.text
                try:
                    facts = parse_flush_reply(
                        reply.text, span, empty_is_nothing=NO_REPLY not in self.prompt
                    )
                    return facts, None, reply_text
                except LlmBadResponseError as exc:
                    error, code = f"{exc.code}: {exc.message}", exc.code
            # the message may quote the reply (the user's facts): the log gets the code only
            log.warning("flush attempt %d failed: %s", attempt + 1, code)
        return [], error, reply_text
