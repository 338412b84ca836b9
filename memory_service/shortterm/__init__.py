"""Short-term memory: one session's messages (AgentState), how they are stored, compacted,
evicted and logged. Kept strictly apart from long-term memory."""

from memory_service.agent_state import AgentState, PlanItem, ToolTrailEntry
from memory_service.replicas.session_state import AgentStateStore, SessionInfo

__all__ = ["AgentState", "AgentStateStore", "PlanItem", "SessionInfo", "ToolTrailEntry"]
