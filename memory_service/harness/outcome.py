"""What one agent call returns: the reply, the prompt it was given and everything memory did.

The API maps these classes to its response schemas by attribute name (``from_attributes``), so
their names and fields are a contract; they carry no JSON form of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memory_service.domain.messages import Msg
from memory_service.llm import Usage
from memory_service.pipeline.flush_result import FlushResult
from memory_service.shortterm.compaction_base import CompactionResult
from memory_service.tools.formatting import ToolOutcome


@dataclass(frozen=True, slots=True)
class RecalledFact:
    """A fact put into the prompt, and why: ``relevance`` (with its score) or ``importance``;
    ``needs_verification``: shown with a mark that asks the agent to check it with the user."""

    id: str
    text: str
    via: str
    importance: int
    kind: str
    score: float | None = None
    needs_verification: bool = False


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
    overflow_compaction: Usage | None = None  # the summary of an overflow's compaction
    # compactions between rounds (the history compacted before a round that would not fit)
    round_compactions: list[CompactionResult] = field(default_factory=list)
    # the full text of tool results evicted as they returned, by tool call id
    evicted_results: dict[str, Msg] = field(default_factory=dict)


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
