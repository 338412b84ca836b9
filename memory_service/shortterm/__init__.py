"""Short-term memory: one session's messages (AgentState), how they are stored, compacted,
evicted and logged. Kept strictly apart from long-term memory."""

from memory_service.shortterm.state import AgentState, PlanItem, ToolTrailEntry
from memory_service.shortterm.store import AgentStateStore, SessionInfo

__all__ = ["AgentState", "AgentStateStore", "PlanItem", "SessionInfo", "ToolTrailEntry"]
