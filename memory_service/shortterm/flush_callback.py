"""The seam between short-term memory and the long-term pipeline: the flush callback.

Short-term memory calls it before compacting and on a context overflow; the pipeline
(``memory_service.pipeline.flush``) implements it. Defined here, below both, so neither imports
the other's layer upwards.
"""

from __future__ import annotations

from typing import Literal, Protocol

from memory_service.agent_state import AgentState
from memory_service.context import RuntimeContext

# Why a flush runs: after a call, before compaction, on a context overflow, asked for, or
# by the scheduler for a session that went quiet (``idle``).
FlushReason = Literal["post_call", "pre_compaction", "overflow", "manual", "idle"]


class FlushCallback(Protocol):
    """Called with the state *before* it is compacted; the long-term pipeline flushes
    ``state.unflushed()`` and moves ``state.last_flushed_index``."""

    def __call__(self, state: AgentState, ctx: RuntimeContext, reason: FlushReason) -> object: ...
