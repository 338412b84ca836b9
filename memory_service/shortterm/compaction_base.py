"""What every compaction policy shares: its result, its protocol, and the triggers.

Apart from ``compaction`` (the summary and sliding-window policies) so that a policy in its own
module (``trimming``) can use them without importing the module that chooses between policies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memory_service.config.memory_settings import CompactionSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.errors import MemoryServiceError
from memory_service.domain.messages import Msg
from memory_service.llm import Usage

# why a compaction ran, or did not: messages | tokens | rounds (triggers), forced, overflow,
# not_needed, nothing_to_compact, no_model, failed, backoff (waiting after a failure)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction did (or why it did not), for logs and API replies."""

    performed: bool
    reason: str
    removed: int = 0  # messages replaced by the summary (or dropped by the window)
    kept: int = 0  # messages kept verbatim
    tokens_before: int = 0
    tokens_after: int = 0
    summary: dict[str, str] | None = None
    usage: Usage | None = None
    error: MemoryServiceError | None = None
    flushed: bool = False  # the flush callback ran (and did not raise)
    flush_error: str | None = None


class Compactor(Protocol):
    config: CompactionSettings

    def needs_compaction(self, state: AgentState) -> str | None:
        """The trigger that fired ("messages", "tokens", "rounds"), or None."""
        ...

    def compact(
        self, state: AgentState, *, reason: str = "forced", aggressive: bool = False
    ) -> CompactionResult:
        """Compact ``state`` in place; on failure raise and leave it untouched."""
        ...


def pinned(message: Msg) -> bool:
    """System messages are instructions, not conversation: never summarised or dropped."""
    return message.role == "system" and message.mark is None


def token_trigger(state: AgentState, config: CompactionSettings, window: int) -> bool:
    return state.token_estimate > config.trigger_ratio * window


def summary_trigger(state: AgentState, config: CompactionSettings, window: int) -> str | None:
    """The summary policy's trigger: ``trigger_messages`` conversation messages (system
    messages not counted), or a token estimate over ``trigger_ratio`` of the window."""
    conversation = [m for m in state.messages if not pinned(m)]
    if len(conversation) >= config.trigger_messages:
        return "messages"
    if token_trigger(state, config, window):
        return "tokens"
    return None
