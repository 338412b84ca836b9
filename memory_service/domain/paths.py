"""Where every file lives in a workspace. One place, so no module builds paths by hand.

    <workspace>/api-keys.json          API keys (development default)
    <workspace>/embedder.json          the embedding model of the files backend's vectors
    <workspace>/qdrant/                Qdrant Edge folders (default MEMORY_QDRANT__PATH)
    <workspace>/tenants/<tenant>/usage.json  token usage of the tenant's LLM calls
    <workspace>/tenants/<tenant>/erased/<digest>.json  an erased user's tombstone (no user id)
    <workspace>/tenants/<tenant>/users/<user>/
        MEMORY.md                      consolidated long-term memory
        memory/YYYY-MM-DD.md           daily ledgers (facts as Markdown bullets), append-only
        memory/archive/                ledgers past retention, MEMORY.<stamp>.md snapshots
        memory/decisions/journal.md    append-only: what maintenance and record decided of them
        .index/vectors-<model>.npz     embeddings cached by content hash (derived)
        .memory.lock                   the long-term write lock
        .maintenance.json / .lock      the last maintenance run / its per-user lock
        sessions/<session>.log.jsonl   append-only session logs
        state/<session>.json (+ .lock) short-term AgentState
        tool-results/<session>/<id>.txt  evicted tool results
        dead-letters/flush.jsonl       flushes that failed (messages kept for a replay)
    <workspace>/tenants/<tenant>/agents/<agent>/   an agent's shared long-term memory
    <workspace>/tenants/<tenant>/shared/           the tenant's shared long-term memory
        (each: MEMORY.md, memory/, .index/, .memory.lock, .maintenance.json, as a user's)

Ids are validated by ``RuntimeContext`` before they get here; ``OwnerPaths`` checks again that
every path stays inside the user's folder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path

from memory_service.domain.context import RuntimeContext, validate_id
from memory_service.domain.errors import InvalidIdError

SESSION_LOG_SUFFIX = ".log.jsonl"
TOOL_RESULTS_DIR = "tool-results"


def id_folders(folder: Path) -> list[str]:
    """The sub-folders of ``folder`` named by valid ids, sorted (links and other names
    skipped): the tenants, users or agents that have a folder."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = []
    for child in sorted(folder.iterdir()):
        try:
            if child.is_dir() and not child.is_symlink():
                found.append(validate_id(child.name))
        except InvalidIdError:
            continue
    return found


@dataclass(frozen=True, slots=True)
class WorkspacePaths:
    """Workspace-level files: keys, Qdrant Edge's default folder, tenants and their users."""

    workspace: Path

    @property
    def api_keys_file(self) -> Path:
        return self.workspace / "api-keys.json"

    @property
    def embedder_record(self) -> Path:
        """The files backend's record of the model its vector caches hold
        (``longterm.store_embedder``)."""
        return self.workspace / "embedder.json"

    @property
    def qdrant_dir(self) -> Path:
        return self.workspace / "qdrant"

    @property
    def tenants_dir(self) -> Path:
        return self.workspace / "tenants"

    def tenant_root(self, tenant_id: str) -> Path:
        return self.tenants_dir / validate_id(tenant_id, "tenant_id")

    def users_dir(self, tenant_id: str) -> Path:
        return self.tenant_root(tenant_id) / "users"

    def agents_dir(self, tenant_id: str) -> Path:
        """The tenant's agents' shared memories, a folder per agent (beside ``users/``)."""
        return self.tenant_root(tenant_id) / "agents"

    def shared_dir(self, tenant_id: str) -> Path:
        """The tenant's own shared memory (the ``tenant`` scope)."""
        return self.tenant_root(tenant_id) / "shared"

    def usage_file(self, tenant_id: str) -> Path:
        """The tenant's token usage, shared by its users."""
        return self.tenant_root(tenant_id) / "usage.json"

    def tombstone(self, tenant_id: str, user_id: str) -> Path:
        """The erased user's tombstone, named by a digest so the file names no user."""
        return self.tenant_root(tenant_id) / "erased" / f"{self.user_digest(user_id)}.json"

    @staticmethod
    def user_digest(user_id: str) -> str:
        """What names (and keys) an erased user's tombstone: 32 hex digits of the id's SHA-256."""
        return hashlib.sha256(validate_id(user_id, "user_id").encode()).hexdigest()[:32]

    def all_state_files(self) -> list[Path]:
        """Every session-state file of every user (the TTL sweep)."""
        return sorted(self.tenants_dir.glob("*/users/*/state/*.json"))


@dataclass(frozen=True, slots=True)
class OwnerPaths:
    """The files of one memory owner: a user (the default), or, for a context in the agent
    or tenant scope, that agent's or the tenant's folder (long-term files only live there)."""

    workspace: Path
    tenant_id: str
    user_id: str
    scope: str = "user"
    agent_id: str | None = None

    @classmethod
    def of(cls, workspace: Path, ctx: RuntimeContext) -> OwnerPaths:
        root = workspace if isinstance(workspace, Path) else Path(workspace)
        return cls(root, ctx.tenant_id, ctx.user_id, ctx.scope, ctx.agent_id)

    @property
    def tenant_root(self) -> Path:
        return WorkspacePaths(self.workspace).tenant_root(self.tenant_id)

    @property
    def root(self) -> Path:
        return _owner_file(self, "")

    @property
    def memory_md(self) -> Path:
        return _owner_file(self, "MEMORY.md")

    @property
    def ledger_dir(self) -> Path:
        return _owner_file(self, "memory")

    @property
    def archive_dir(self) -> Path:
        return self.ledger_dir / "archive"

    @property
    def decisions_journal(self) -> Path:
        """What maintenance and record decided about the ledgers' facts (files backend)."""
        return _owner_file(self, "memory/decisions/journal.md")  # every recall stats it

    def ledger(self, day: date) -> Path:
        return self.ledger_dir / f"{day.isoformat()}.md"

    def ledger_candidates(self) -> list[Path]:
        """The daily ledgers' paths, oldest first (not checked for links: callers do)."""
        return sorted(self.ledger_dir.glob("*.md"))

    def archived_ledger(self, day: date) -> Path:
        return self.archive_dir / f"{day.isoformat()}.md"

    def memory_snapshot(self, stamp: str) -> Path:
        """A copy of MEMORY.md taken before consolidation rewrote it."""
        return self.archive_dir / f"MEMORY.{stamp}.md"

    @property
    def index_dir(self) -> Path:
        """Derived per-user index files (the vector caches of every embedding model)."""
        return _owner_file(self, ".index")

    def vector_cache(self, model_slug: str) -> Path:
        return _owner_file(self, f".index/vectors-{model_slug}.npz")

    def vector_caches(self) -> list[Path]:
        """The vector caches of every model, in name order."""
        return sorted(self.index_dir.glob("vectors-*.npz"))

    @property
    def access_file(self) -> Path:
        """Recall counts and last access per fact (files backend; forget removes it)."""
        return _owner_file(self, ".index/access.json")

    @property
    def lock_file(self) -> Path:
        return self.root / ".memory.lock"

    @property
    def maintenance_state(self) -> Path:
        return self.root / ".maintenance.json"

    @property
    def maintenance_lock(self) -> Path:
        return self.root / ".maintenance.lock"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    def session_log(self, session_id: str) -> Path:
        return self.sessions_dir / f"{validate_id(session_id, 'session_id')}{SESSION_LOG_SUFFIX}"

    def session_logs(self) -> dict[str, Path]:
        """Session id -> its log, for every log in the folder, in name order."""
        found = sorted(self.sessions_dir.glob(f"*{SESSION_LOG_SUFFIX}"))
        return {p.name.removesuffix(SESSION_LOG_SUFFIX): p for p in found}

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def state_file(self, session_id: str) -> Path:
        return self.state_dir / f"{validate_id(session_id, 'session_id')}.json"

    def state_files(self) -> dict[str, Path]:
        """Session id -> its state file, for every state file in the folder, in name order."""
        return {p.name.removesuffix(".json"): p for p in sorted(self.state_dir.glob("*.json"))}

    @property
    def tool_results_root(self) -> Path:
        return self.root / TOOL_RESULTS_DIR

    def tool_results_dir(self, session_id: str) -> Path:
        return self.tool_results_root / validate_id(session_id, "session_id")

    def tool_result(self, session_id: str, file_id: str) -> Path:
        return self.tool_results_dir(session_id) / f"{file_id}.txt"

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
        return lock_for(self.flush_dead_letters)

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


@lru_cache(maxsize=16384)
def _owner_file(paths: OwnerPaths, name: str) -> Path:
    """``name`` under the owner's folder (``""``: the folder). Cached: a recall reads the
    same few paths of every scope it searches, and building them costs more than the rest
    of a small scope's lexical pass. A bad id raises every time (exceptions are not cached)."""
    workspace = WorkspacePaths(paths.workspace)
    if paths.scope == "agent":
        root = workspace.agents_dir(paths.tenant_id) / validate_id(paths.agent_id, "agent_id")
    elif paths.scope == "tenant":
        root = workspace.shared_dir(paths.tenant_id)
    else:
        root = paths.tenant_root / "users" / validate_id(paths.user_id, "user_id")
    return root / name if name else root


def tenant_usage_file(workspace: Path, tenant_id: str) -> Path:
    """The tenant's token usage (``tenants/<tenant>/usage.json``), shared by its users."""
    return WorkspacePaths(Path(workspace)).usage_file(tenant_id)


def lock_for(path: Path) -> Path:
    """The lock file that guards ``path``: ``<name>.lock`` beside it."""
    return path.with_name(path.name + ".lock")
