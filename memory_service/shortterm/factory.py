"""Build short-term memory from Settings alone: the backend is a setting, not a code path."""

from __future__ import annotations

from datetime import timedelta

from memory_service.config import Settings
from memory_service.errors import ConfigurationError
from memory_service.llm import ChatModel
from memory_service.shortterm.eviction import ToolResultEvictor
from memory_service.shortterm.session import ShortTermMemory
from memory_service.shortterm.session_log import SessionLog
from memory_service.shortterm.store import AgentStateStore


def build_state_store(settings: Settings) -> AgentStateStore:
    cfg = settings.shortterm
    ttl = timedelta(hours=cfg.ttl_hours) if cfg.ttl_hours else None
    if cfg.backend == "files":
        from memory_service.shortterm.files_store import FileStateStore

        return FileStateStore(settings.workspace, ttl=ttl)
    if cfg.backend == "postgres":
        if not settings.postgres.dsn:
            raise ConfigurationError(
                "MEMORY_POSTGRES__DSN: required when MEMORY_SHORTTERM__BACKEND=postgres"
            )
        from memory_service.shortterm.postgres_store import PostgresStateStore

        return PostgresStateStore(
            settings.postgres.dsn,
            table=cfg.postgres_table,
            ttl=ttl,
            pool_min=settings.postgres.pool_min,
            pool_max=settings.postgres.pool_max,
        )
    raise ConfigurationError(f"MEMORY_SHORTTERM__BACKEND: unknown backend {cfg.backend!r}")


def build_shortterm(settings: Settings, memory_model: ChatModel | None) -> ShortTermMemory:
    """Sessions on the configured store; compaction uses ``memory_model`` (None: no LLM)."""
    cfg = settings.shortterm
    return ShortTermMemory(
        build_state_store(settings),
        SessionLog(settings.workspace),
        ToolResultEvictor(
            settings.workspace,
            max_chars=cfg.tool_result_max_chars,
            preview_chars=cfg.tool_result_preview_chars,
        ),
        config=settings.compaction,
        model=memory_model,
        context_window=settings.llm.context_window,
    )
