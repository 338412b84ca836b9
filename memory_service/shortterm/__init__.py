"""Short-term memory: one session's messages (AgentState), how they are stored, compacted,
evicted and logged. Kept strictly apart from long-term memory.

No re-exports: ``AgentState`` comes from ``memory_service.domain.agent_state`` and the session-state
stores from ``memory_service.stores.shortterm.session_state``, so each name has one import path."""
