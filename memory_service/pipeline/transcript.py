"""The conversation as the memory model sees it: one line per message, in batches that fit.

Only what can hold a new fact is sent: instructions, hints, summaries and the memory tools' own
output are left out (a recalled memory must not be extracted again), and each message is cut
(a tool result to a glimpse). Lines are grouped into batches that fit the memory model's
window next to the prompt and MEMORY.md; every unflushed message belongs to one batch, sent or
not, so the watermark can move past a batch once its facts are recorded. Each line starts with
its message's number (``#12``, the ``seq``), which the model cites after a memory so the fact
keeps its source (``pipeline/extraction.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memory_service.domain.messages import MEMORY_TOOL_NAMES, Msg, estimate_tokens
from memory_service.shortterm.summary import render_line

TRANSCRIPT_SHARE = 0.5  # of the memory model's window, at most, per flush request
MIN_TRANSCRIPT_TOKENS = 512
DEFAULT_WINDOW = 128_000  # tokens, when there is no model to ask
MAX_CHARS_PER_MESSAGE = 2_000
MAX_CHARS_PER_TOOL_RESULT = 300  # transient tool output: a glimpse is enough


@dataclass(slots=True)
class TranscriptBatch:
    """One request's worth of transcript."""

    lines: list[str]
    messages: list[Msg]  # every unflushed message the batch covers (sent or not)
    through_seq: int
    said: dict[int, str] = field(default_factory=dict)  # seq -> content, of the numbered lines


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


def transcript_budget(window: int, prompt: str, memory_md: str) -> int:
    """Tokens a batch's transcript may use: a share of the model's window, less the prompt and
    MEMORY.md that ride along, never under ``MIN_TRANSCRIPT_TOKENS``."""
    budget = int(window * TRANSCRIPT_SHARE) - estimate_tokens(prompt)
    return max(MIN_TRANSCRIPT_TOKENS, budget - estimate_tokens(memory_md))


def with_positions(messages: Sequence[Msg]) -> list[Msg]:
    """``messages`` with a ``seq`` each: batching needs positions, and messages from outside a
    session (a dead letter's) may lack them."""
    return [m if m.seq is not None else m.with_seq(i) for i, m in enumerate(messages)]


def batch_transcript(pending: Sequence[Msg], budget: int) -> list[TranscriptBatch]:
    """Transcript lines in batches of about ``budget`` tokens (a longer single line is a batch
    of its own); ``[]`` when no message has anything to say."""
    batches: list[TranscriptBatch] = []
    lines: list[str] = []
    covered: list[Msg] = []
    said: dict[int, str] = {}
    used = 0
    for message in pending:
        line = transcript_line(message)
        if line and message.seq is not None:
            line = f"#{message.seq} {line}"
        cost = estimate_tokens(line) if line else 0
        if line and lines and used + cost > budget:
            batches.append(TranscriptBatch(lines, covered, last_seq(covered), said))
            lines, covered, said, used = [], [], {}, 0
        covered.append(message)
        if line:
            lines.append(line)
            used += cost
            if message.seq is not None:
                said[message.seq] = message.content
    if lines:
        batches.append(TranscriptBatch(lines, covered, last_seq(covered), said))
    elif batches:  # trailing messages with nothing to say ride with the last batch
        batches[-1].messages += covered
        batches[-1].through_seq = last_seq(batches[-1].messages)
    return batches


def last_seq(messages: Sequence[Msg]) -> int:
    """The highest position among ``messages`` (each batch has at least one)."""
    return max(m.seq for m in messages if m.seq is not None)
