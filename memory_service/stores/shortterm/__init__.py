"""What short-term memory keeps between calls: each session's ``AgentState``
(``session_state``), its append-only message log (``session_logs``) and the tool results
evicted from its context (``tool_results``); each in the workspace, PostgreSQL (or Redis, for
session states)."""
