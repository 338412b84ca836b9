"""Where a user's files live in a workspace. One place, so no module builds paths by hand.

    <workspace>/tenants/<tenant>/users/<user>/
        MEMORY.md                      consolidated long-term memory
        memory/YYYY-MM-DD.md           daily ledgers (facts as Markdown bullets)
        memory/archive/                ledgers past retention
        sessions/<session>.log.jsonl   append-only session logs
        state/<session>.json           short-term AgentState
        tool-results/<session>/<id>.txt  evicted tool results
        dead-letters/flush.jsonl       flushes that failed (messages kept for a replay)
    <workspace>/tenants/<tenant>/usage.json  token usage of the tenant's LLM calls

Ids are validated by ``RuntimeContext`` before they get here; ``UserPaths`` checks again that
every path stays inside the user's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

from memory_service.context import RuntimeContext, validate_id
from memory_service.errors import InvalidIdError


@dataclass(frozen=True, slots=True)
class UserPaths:
    workspace: Path
    tenant_id: str
    user_id: str

    @classmethod
    def of(cls, workspace: Path, ctx: RuntimeContext) -> UserPaths:
        return cls(Path(workspace), ctx.tenant_id, ctx.user_id)

    @property
    def tenant_root(self) -> Path:
        return self.workspace / "tenants" / validate_id(self.tenant_id, "tenant_id")

    @property
    def root(self) -> Path:
        return self.tenant_root / "users" / validate_id(self.user_id, "user_id")

    @property
    def memory_md(self) -> Path:
        return self.root / "MEMORY.md"

    @property
    def ledger_dir(self) -> Path:
        return self.root / "memory"

    @property
    def archive_dir(self) -> Path:
        return self.ledger_dir / "archive"

    def ledger(self, day: date) -> Path:
        return self.ledger_dir / f"{day.isoformat()}.md"

    @property
    def lock_file(self) -> Path:
        return self.root / ".memory.lock"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    def session_log(self, session_id: str) -> Path:
        return self.sessions_dir / f"{validate_id(session_id, 'session_id')}.log.jsonl"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def state_file(self, session_id: str) -> Path:
        return self.state_dir / f"{validate_id(session_id, 'session_id')}.json"

    def tool_results_dir(self, session_id: str) -> Path:
        return self.root / "tool-results" / validate_id(session_id, "session_id")

    @property
    def dead_letters_dir(self) -> Path:
        return self.root / "dead-letters"

    def dead_letters(self, pipeline: str) -> Path:
        """``dead-letters/<pipeline>.jsonl``: work that failed and must not be lost."""
        return self.dead_letters_dir / f"{validate_id(pipeline, 'pipeline')}.jsonl"

    @property
    def flush_dead_letters(self) -> Path:
        """``dead-letters/flush.jsonl``: flushes that failed, their messages kept for a replay."""
        return self.dead_letters("flush")

    @property
    def flush_dead_letters_lock(self) -> Path:
        """The lock every append to and rewrite of ``flush_dead_letters`` holds."""
        return self.dead_letters_dir / "flush.jsonl.lock"

    @property
    def flush_replay_lock(self) -> Path:
        """Held by the one replay of this user's flush dead letters that may run at a time."""
        return self.dead_letters_dir / ".flush.replay.lock"

    def inside(self, path: Path) -> Path:
        """``path`` resolved, if it is inside this user's folder; else ``InvalidIdError``."""
        root = self.root.resolve()
        resolved = path.resolve()
        if resolved != root and root not in resolved.parents:
            raise InvalidIdError("path escapes the user's folder", code="path_outside_user")
        return resolved


def tenant_usage_file(workspace: Path, tenant_id: str) -> Path:
    """The tenant's token usage (``tenants/<tenant>/usage.json``), shared by its users."""
    return Path(workspace) / "tenants" / validate_id(tenant_id, "tenant_id") / "usage.json"
