"""The one place that chooses files or PostgreSQL for every replica store.

With no database (the single-node default) each store lives in the workspace; with one
(``MEMORY_STATE__BACKEND=postgres``; ``open_database``) each lives in PostgreSQL, so replicas
behind a load balancer share them and none of it is on a replica's disk. Session states follow
``MEMORY_SHORTTERM__BACKEND`` on their own: PostgreSQL session states beside workspace state
get a pool of their own. The composition root (``services``) calls these and nothing else
decides where a store lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from memory_service.config.settings import Settings
from memory_service.domain.errors import ConfigurationError
from memory_service.stores.api_keys import KeyStore
from memory_service.stores.api_keys.files import FilesKeyStore
from memory_service.stores.database import Database
from memory_service.stores.dead_letters import DeadLetterStore
from memory_service.stores.dead_letters.files import FilesDeadLetterStore
from memory_service.stores.maintenance_state import MaintenanceState
from memory_service.stores.maintenance_state.files import FilesMaintenanceState
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.stores.memory_docs.files import FilesMemoryDocs
from memory_service.stores.shortterm.session_logs import SessionLogStore
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_state import AgentStateStore
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.tool_results import ToolResultStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones
from memory_service.stores.usage import UsageStore
from memory_service.stores.usage.files import FilesUsageStore
from memory_service.stores.user_data import ListsUsers, UserData


def open_database(settings: Settings) -> Database | None:
    """The PostgreSQL that keeps this replica's state (``MEMORY_STATE__BACKEND``), or None
    when that state lives in the workspace. Unreachable: a start-up error naming the DSN."""
    if not settings.state_in_postgres:
        return None
    return _database(settings)


def _database(settings: Settings) -> Database:
    if not settings.postgres.dsn:
        raise ConfigurationError(
            "MEMORY_POSTGRES__DSN: required when MEMORY_SHORTTERM__BACKEND=postgres"
        )
    return Database(
        settings.postgres.dsn,
        pool_min=settings.postgres.pool_min,
        pool_max=settings.postgres.pool_max,
        connect_timeout_s=settings.postgres.connect_timeout_s,
        schema=settings.postgres.schema_name,
    )


@dataclass(frozen=True, slots=True)
class ReplicaStores:
    """Tombstones, usage counters, the flush's dead letters and maintenance's marker and
    lock, all in the workspace or all in ``database``."""

    tombstones: Tombstones
    usage: UsageStore
    dead_letters: DeadLetterStore
    maintenance: MaintenanceState
    database: Database | None = None

    @property
    def in_postgres(self) -> bool:
        return self.database is not None

    @classmethod
    def of(cls, workspace: Path, database: Database | None = None) -> ReplicaStores:
        """Every store in the workspace, or (``database`` given) every store in PostgreSQL;
        the tables are created when missing."""
        if database is None:
            tombstones = FilesTombstones(workspace)
            return cls(
                tombstones,
                FilesUsageStore(workspace),
                FilesDeadLetterStore(workspace, tombstones),
                FilesMaintenanceState(workspace),
            )
        from memory_service.stores.dead_letters.postgres import PostgresDeadLetterStore
        from memory_service.stores.maintenance_state.postgres import PostgresMaintenanceState
        from memory_service.stores.tombstones.postgres import PostgresTombstones
        from memory_service.stores.usage.postgres import PostgresUsageStore

        erased = PostgresTombstones(database)
        return cls(
            erased,
            PostgresUsageStore(database),
            PostgresDeadLetterStore(database, erased),
            PostgresMaintenanceState(database),
            database,
        )

    def flush_stores(self) -> dict[str, Any]:
        """``MemoryFlushManager``'s keyword arguments for these stores."""
        return {"usage": self.usage, "dead_letters": self.dead_letters}

    def maintenance_stores(self) -> dict[str, Any]:
        """``MemoryMaintenance``'s keyword arguments for these stores."""
        return {"usage": self.usage, "state": self.maintenance, "tombstones": self.tombstones}

    def user_sources(self, *others: object) -> list[ListsUsers]:
        """The stores (these, and ``others`` such as the session store) that name users
        without workspace folders, for ``scheduler.known_users``."""
        stores = (self.dead_letters, self.maintenance, *others)
        return [store for store in stores if isinstance(store, ListsUsers)]

    def left_in_workspace(self, workspace: Path) -> list[tuple[str, UserData]]:
        """With PostgreSQL state, the workspace's own stores of the same data, which an erase
        still empties (kept there before the switch); none otherwise."""
        if not self.in_postgres:
            return []
        return [
            ("dead_letters.files", FilesDeadLetterStore(workspace)),
            ("maintenance.files", FilesMaintenanceState(workspace)),
        ]

    def memory_docs(self, settings: Settings) -> MemoryDocs:
        """Where MEMORY.md and its snapshots live: PostgreSQL for the Qdrant backend when
        replica state is there (``memory_docs/postgres.py`` says why, and how files move
        there); files otherwise (the files backend reads its MEMORY.md as facts)."""
        if self.database is not None and settings.longterm.backend == "qdrant":
            from memory_service.stores.memory_docs.postgres import PostgresMemoryDocs

            docs = PostgresMemoryDocs(self.database, settings.workspace, tombstones=self.tombstones)
            docs.import_files(settings.workspace)  # files of a deployment before PostgreSQL
            return docs
        return FilesMemoryDocs(settings.workspace, tombstones=self.tombstones)

    def session_logs(self, settings: Settings) -> tuple[SessionLogStore, ToolResultStore]:
        """Session logs and evicted tool results, beside the other replica state; a replica
        that moves to PostgreSQL moves its workspace's logs there at start."""
        cfg = settings.shortterm
        sizes = {
            "max_chars": cfg.tool_result_max_chars,
            "preview_chars": cfg.tool_result_preview_chars,
        }
        erased = self.tombstones
        if self.database is None:
            return (
                FilesSessionLogStore(settings.workspace, tombstones=erased),
                FilesToolResultStore(settings.workspace, tombstones=erased, **sizes),
            )
        from memory_service.stores.logs_from_files import move_workspace_logs
        from memory_service.stores.shortterm.session_logs.postgres import PostgresSessionLogStore
        from memory_service.stores.shortterm.tool_results.postgres import PostgresToolResultStore

        logs = PostgresSessionLogStore(self.database, settings.workspace, tombstones=erased)
        results = PostgresToolResultStore(
            self.database, settings.workspace, tombstones=erased, **sizes
        )
        move_workspace_logs(settings.workspace, logs, results)  # those of a files deployment
        return logs, results

    def session_states(self, settings: Settings) -> AgentStateStore:
        """The configured session-state store (``MEMORY_SHORTTERM__BACKEND``)."""
        return session_states(settings, self.database, self.tombstones)

    def api_keys(self, settings: Settings) -> KeyStore:
        """The API keys: the keys file, or the table beside the other replica state."""
        return api_keys(settings, self.database)


def session_states(
    settings: Settings, database: Database | None = None, tombstones: Tombstones | None = None
) -> AgentStateStore:
    """Session states on ``MEMORY_SHORTTERM__BACKEND``: files, PostgreSQL in ``database`` (a
    pool of their own when replica state is in the workspace), or Redis."""
    cfg = settings.shortterm
    ttl = timedelta(hours=cfg.ttl_hours) if cfg.ttl_hours else None
    erased = tombstones if tombstones is not None else FilesTombstones(settings.workspace)
    if cfg.backend == "files":
        return FilesAgentStateStore(settings.workspace, ttl=ttl, tombstones=erased)
    if cfg.backend == "postgres":
        return postgres_session_states(settings, database, erased)
    if cfg.backend == "redis":
        from memory_service.stores.shortterm.session_state.redis import (
            URL_SETTING,
            RedisAgentStateStore,
        )

        if settings.redis.url is None:
            needs = "required when MEMORY_SHORTTERM__BACKEND=redis"
            raise ConfigurationError(f"{URL_SETTING}: {needs}")
        return RedisAgentStateStore(
            settings.redis.url.get_secret_value(),
            key_prefix=settings.redis.key_prefix,
            ttl=ttl,
            tombstones=erased,
        )
    raise ConfigurationError(f"MEMORY_SHORTTERM__BACKEND: unknown backend {cfg.backend!r}")


def postgres_session_states(
    settings: Settings, database: Database | None = None, tombstones: Tombstones | None = None
) -> AgentStateStore:
    """Session states in PostgreSQL whatever ``MEMORY_SHORTTERM__BACKEND`` says (an erase
    reaches those of a deployment before a switch); in ``database``, else a pool of their own
    that closes with the store."""
    from memory_service.stores.shortterm.session_state.postgres import PostgresAgentStateStore

    cfg = settings.shortterm
    own = database is None
    db = _database(settings) if database is None else database
    try:
        return PostgresAgentStateStore(
            db,
            table=cfg.postgres_table,
            ttl=timedelta(hours=cfg.ttl_hours) if cfg.ttl_hours else None,
            tombstones=tombstones or FilesTombstones(settings.workspace),
            owns_database=own,
        )
    except BaseException:
        if own:
            db.close()
        raise


def keys_file(settings: Settings) -> Path:
    """``MEMORY_API_KEYS_FILE``, else ``<workspace>/api-keys.json``; absolute."""
    from memory_service.domain.paths import WorkspacePaths

    path = settings.api_keys_file or WorkspacePaths(settings.workspace).api_keys_file
    return path.resolve()


def api_keys(settings: Settings, database: Database | None = None) -> KeyStore:
    """The keys file, or (``database``: replica state in PostgreSQL) the keys table, which
    ``keys migrate`` fills from the keys file."""
    if database is None:
        return FilesKeyStore(keys_file(settings))
    from memory_service.stores.api_keys.postgres import PostgresKeyStore

    return PostgresKeyStore(database, keys_file=keys_file(settings))
