"""What one agent call returns: the reply, the prompt it was given and everything memory did.

The API maps these classes to its response schemas by attribute name, so their names and
fields are a contract (``to_dict`` is the harness's own JSON form).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory_service.llm import Usage
from memory_service.messages import Msg
from memory_service.pipeline.flush_result import FlushResult
from memory_service.shortterm.compaction import CompactionResult
from memory_service.tools import ToolOutcome


@dataclass(frozen=True, slots=True)
class RecalledFact:
    """A fact put into the prompt, and why: ``relevance`` (with its score) or ``importance``."""

    id: str
    text: str
    via: str
    importance: int
    kind: str
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "via": self.via,
            "importance": self.importance,
            "kind": self.kind,
            "score": self.score,
        }


@dataclass(slots=True)
class MemoryPrompt:
    """The system prompt of one call and what went into it."""

    text: str
    recalled: list[RecalledFact] = field(default_factory=list)
    memory_md_tokens: int = 0  # tokens of MEMORY.md shown
    memory_md_total_tokens: int = 0
    memory_md_truncated: bool = False


@dataclass(slots=True)
class Turn:
    """What the model loop produced; usage and tool outcomes survive an overflow retry."""

    messages: list[Msg] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    tools: list[ToolOutcome] = field(default_factory=list)
    iterations: int = 0


@dataclass(slots=True)
class ChatOutcome:
    """The reply and everything memory did for it."""

    reply: str
    session_id: str
    version: int
    prompt: MemoryPrompt
    flushes: list[FlushResult]
    compaction: CompactionResult | None
    overflow_retry: bool
    tool_calls: list[ToolOutcome]
    evicted: list[str]
    usage: dict[str, Usage]
    iterations: int

    @property
    def flushed_facts(self) -> list[dict[str, Any]]:
        return [f.to_dict() for result in self.flushes for f in result.facts]

    def to_dict(self) -> dict[str, Any]:
        total = sum(self.usage.values(), Usage())
        return {
            "reply": self.reply,
            "session_id": self.session_id,
            "version": self.version,
            "memory": {
                "recalled": [r.to_dict() for r in self.prompt.recalled],
                "memory_md": {
                    "tokens": self.prompt.memory_md_tokens,
                    "total_tokens": self.prompt.memory_md_total_tokens,
                    "truncated": self.prompt.memory_md_truncated,
                },
                "flushed_facts": self.flushed_facts,
                "flushes": [f.to_dict() for f in self.flushes],
                "compaction": self.compaction.to_dict() if self.compaction else None,
                "overflow_retry": self.overflow_retry,
                "tool_calls": [t.to_dict() for t in self.tool_calls],
                "evicted": list(self.evicted),
            },
            "usage": {
                **{purpose: u.to_dict() for purpose, u in self.usage.items()},
                "total": total.to_dict(),
            },
            "iterations": self.iterations,
        }
