"""What a flush reports: its outcome, the facts it recorded, its tokens, its dead letter.

Apart from the manager because the extraction fills it in too (facts, attempts, usage) and the
harness and the API report it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memory_service.domain.facts import Fact, RecordResult
from memory_service.llm import Usage


@dataclass(frozen=True, slots=True)
class FlushedFact:
    id: str
    text: str
    status: str  # created | duplicate | superseded | merged (``id``: the fact it joined)
    kind: str
    importance: int
    key: str | None = None

    @classmethod
    def pair(cls, facts: Sequence[Fact], results: Sequence[RecordResult]) -> list[FlushedFact]:
        """Each recorded fact with what ``record`` said of it."""
        return [
            cls(r.id, f.text, r.status, f.kind, f.importance, f.key)
            for f, r in zip(facts, results, strict=True)
        ]


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

    @property
    def facts_created(self) -> int:
        """Facts that are new to long-term memory (created or superseding an older one)."""
        return sum(1 for f in self.facts if f.status not in ("duplicate", "merged"))
