"""The seams between short-term memory and the long-term pipeline: the flush callback and the
archive callback.

Short-term memory calls the flush before compacting and on a context overflow, and the
archive when a session ends; the pipeline (``memory_service.pipeline.flush``,
``memory_service.pipeline.session_archive``) implements them. Defined here, below both, so
neither imports the other's layer upwards.
"""

from __future__ import annotations

from typing import Literal, Protocol

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext

# Why a flush runs: after a call, before compaction, on a context overflow, asked for, by
# the scheduler for a session that went quiet (``idle``) or whose state expires (``expiry``),
# or because the session ends (``end``).
FlushReason = Literal["post_call", "pre_compaction", "overflow", "manual", "idle", "expiry", "end"]


class FlushOutcome(Protocol):
    """What a flush answers: ``status`` ``failed`` means its messages went to a dead letter
    and are still unflushed, ``error`` says why (the pipeline's ``FlushResult``)."""

    status: str
    error: str | None

    @property
    def facts_created(self) -> int: ...


class FlushCallback(Protocol):
    """Called with the state *before* it is compacted (or cleared); the long-term pipeline
    flushes ``state.unflushed()`` and moves ``state.last_flushed_index``."""

    def __call__(
        self, state: AgentState, ctx: RuntimeContext, reason: FlushReason
    ) -> FlushOutcome: ...


class ArchiveOutcome(Protocol):
    """What an archive answers (the pipeline's ``ArchiveResult``)."""

    def to_dict(self) -> dict[str, int]: ...


class ArchiveCallback(Protocol):
    """Called with the state of a session that ends, before it is cleared: the long-term
    pipeline records its messages as events, with no model."""

    def __call__(self, state: AgentState, ctx: RuntimeContext) -> ArchiveOutcome: ...
