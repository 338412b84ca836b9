"""The session archive: a session's messages handed to long-term memory as events, no model.

Where the flush asks a model which durable facts a conversation holds, the archive keeps what
was said: each message that carries something a person said or answered becomes one fact of
kind ``event``, written ``<speaker>: <text>`` (the message's ``name``, else its role: the form
the LoCoMo benchmark's ``turns`` unit records, so its recall figures are the archive's), dated
when it was said, with the session and the message's number as its provenance (origin
``session_archive``). Left out: instructions (system messages), hints and summaries the service
wrote, assistant messages that only call tools, and every tool result, since a tool answers
with what was true when it was called (a price, the weather, an order's status) and the reply
that used it is archived. Ids derive from the text, so archiving a session twice records
nothing new. Importance is ``ARCHIVE_IMPORTANCE``: below the prompt's recall-by-importance floor
and below what a flush gives a fact, so raw turns are found by relevance without crowding
MEMORY.md or the injected facts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source
from memory_service.domain.limits import MAX_FACT_TEXT_BYTES, MAX_FACTS_PER_RECORD
from memory_service.domain.messages import Msg
from memory_service.longterm.protocol import LongTermMemory

log = logging.getLogger(__name__)

ORIGIN = "session_archive"
ARCHIVE_IMPORTANCE = 3  # under the recall-by-importance floor (5) and a flushed fact's usual


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    """What archiving a session did: facts ``recorded`` anew, ``duplicates`` (the same text
    already stored), and the messages ``left_out`` (tool results, instructions, empty)."""

    recorded: int = 0
    duplicates: int = 0
    left_out: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"recorded": self.recorded, "duplicates": self.duplicates, "left_out": self.left_out}


def archive_text(message: Msg) -> str | None:
    """The event a message becomes (``<speaker>: <text>``, within a fact's size), or None for
    a message the archive leaves out."""
    if message.role in ("system", "tool") or message.mark is not None:
        return None
    content = message.content.strip()
    if not content:
        return None  # an assistant message that only calls tools
    text = f"{message.name or message.role}: {content}"
    raw = text.encode("utf-8")
    if len(raw) > MAX_FACT_TEXT_BYTES:  # a pasted document: its head, as the bench cuts it
        text = raw[:MAX_FACT_TEXT_BYTES].decode("utf-8", errors="ignore").rstrip()
    return text


def archive_facts(messages: Sequence[Msg], session_id: str | None) -> list[Fact]:
    """The events of ``messages`` (``archive_text``), in the order they were said."""
    facts = []
    for message in messages:
        text = archive_text(message)
        if text is None:
            continue
        numbers = (message.seq,) if message.seq is not None else ()
        facts.append(
            Fact(
                text,
                kind="event",
                importance=ARCHIVE_IMPORTANCE,
                created_at=message.created_at,
                session_id=session_id,
                source=Source(ORIGIN, session_id, numbers),
            )
        )
    return facts


class SessionArchiver:
    """Records a session's messages into ``longterm`` as events (``ArchiveCallback``)."""

    def __init__(self, longterm: LongTermMemory) -> None:
        self.longterm = longterm

    def __call__(self, state: AgentState, ctx: RuntimeContext) -> ArchiveResult:
        """Archive every message ``state`` holds (a repeat records nothing new)."""
        facts = archive_facts(state.messages, ctx.session_id)
        recorded = duplicates = 0
        for start in range(0, len(facts), MAX_FACTS_PER_RECORD):
            for result in self.longterm.record(ctx, facts[start : start + MAX_FACTS_PER_RECORD]):
                if result.status in ("duplicate", "merged"):  # already stored, or joined one
                    duplicates += 1
                else:
                    recorded += 1
        left_out = len(state.messages) - len(facts)
        log.info(
            "archive of %s/%s/%s: %d events recorded, %d already stored, %d messages left out",
            ctx.tenant_id,
            ctx.user_id,
            ctx.session_id,
            recorded,
            duplicates,
            left_out,
        )
        return ArchiveResult(recorded, duplicates, left_out)
