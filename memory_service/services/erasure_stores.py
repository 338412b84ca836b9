"""``build_erasure``: every store that can hold a user's data, for an erase (GDPR art. 17)."""

from __future__ import annotations

from memory_service.config.settings import Settings
from memory_service.domain.errors import BackendUnavailableError
from memory_service.domain.paths import WorkspacePaths
from memory_service.longterm.files.vector_cache import VectorCaches
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.erasure import UserErasure
from memory_service.services.container import Services
from memory_service.services.work import build_maintenance
from memory_service.stores.build import postgres_session_states
from memory_service.stores.memory_docs.files import FilesMemoryDocs
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_state import AgentStateStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from memory_service.stores.user_data import UserData


def build_erasure(services: Services) -> UserErasure:
    """Every store that can hold data of a user, in the order an erase empties them: the
    configured ones, and the other backends whose data this configuration can still reach
    (files ledgers and state files in the workspace, the Qdrant folder or server it names,
    the PostgreSQL DSN it names), so a user is erased from a backend used before a switch
    too. Close it after use: it releases the stores it opened. A new store of user data joins
    here (``pipeline/erasure.py``: ``UserData``)."""
    settings, workspace = services.settings, services.settings.workspace
    if services.shortterm is None:
        raise BackendUnavailableError("erasing a user needs short-term memory")
    opened: list[LongTermMemory | AgentStateStore] = []
    try:
        longterm: dict[str, UserData] = {settings.longterm.backend: services.longterm}
        if "files" not in longterm:
            from memory_service.longterm.files.backend import FileSystemLongTermMemory

            # an erase embeds nothing: a store of another embedding model is erased too
            files = FileSystemLongTermMemory(workspace, services.embedder, verify_embedder=False)
            opened.append(files)
            longterm["files"] = files
        if "qdrant" not in longterm and _qdrant_reachable(settings):
            from memory_service.longterm.qdrant.backend import open_qdrant

            qdrant = open_qdrant(
                settings.qdrant, workspace, services.embedder, verify_embedder=False
            )
            opened.append(qdrant)
            longterm["qdrant"] = qdrant
        sessions: dict[str, UserData] = {settings.shortterm.backend: services.shortterm.store}
        if "files" not in sessions:
            from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore

            sessions["files"] = FilesAgentStateStore(workspace)
        if "postgres" not in sessions and settings.postgres.dsn:
            other = postgres_session_states(settings)
            opened.append(other)
            sessions["postgres"] = other
    except BaseException:
        for store in opened:
            store.close()
        raise
    stores: list[tuple[str, UserData]] = [
        ("memory_md", FilesMemoryDocs(workspace)),  # before the ledgers: not counted as facts
        ("vector_caches", VectorCaches(workspace)),
        *((f"facts.{name}", store) for name, store in longterm.items()),
        *((f"sessions.{name}", store) for name, store in sessions.items()),
        ("session_logs", services.shortterm.log),
        ("tool_results", services.shortterm.tool_results),
        *_workspace_logs(services),
        ("dead_letters", services.state.dead_letters),
        ("maintenance", build_maintenance(services)),
        *services.state.left_in_workspace(workspace),  # from before a switch to PostgreSQL state
    ]
    if services.database is not None:  # MEMORY.md of the Qdrant backend (before a switch too)
        from memory_service.stores.memory_docs.postgres import PostgresMemoryDocs

        stores.insert(1, ("memory_md.postgres", PostgresMemoryDocs(services.database, workspace)))
    closes = [store.close for store in opened]
    return UserErasure(workspace, stores, on_close=closes, tombstones=services.state.tombstones)


def _workspace_logs(services: Services) -> list[tuple[str, UserData]]:
    """With logs and tool results in PostgreSQL, the workspace's too (from before a switch)."""
    if services.database is None:
        return []
    ws = services.settings.workspace
    return [
        ("session_logs.files", FilesSessionLogStore(ws)),
        ("tool_results.files", FilesToolResultStore(ws)),
    ]


def _qdrant_reachable(settings: Settings) -> bool:
    """Whether this configuration names Qdrant data that outlives a process: a server, or an
    Edge folder that exists (qdrant-client's ``:memory:`` mode keeps nothing)."""
    cfg = settings.qdrant
    if cfg.url:
        return cfg.url != ":memory:"
    root = cfg.path if cfg.path is not None else WorkspacePaths(settings.workspace).qdrant_dir
    return (root / cfg.collection).is_dir()
