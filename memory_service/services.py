"""The composition root: every object of the service is built here, from ``Settings`` alone.

Backends are swapped by configuration, never by code: ``serve``, every CLI command, the API and
the benchmarks call ``build_services`` (and ``build_maintenance`` / ``build_harness`` on top of
it); nothing below this module reads ``Settings`` to decide which class to build. It sits above
every part it wires (see ARCHITECTURE.md), so no part needs to import it back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property

from indexing.embeddings import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from memory_service.config import Settings
from memory_service.context import RuntimeContext
from memory_service.errors import BackendUnavailableError, ConfigurationError
from memory_service.fact_filter import ConfidenceDecay, ExpiryPolicy
from memory_service.harness import MemoryHarness
from memory_service.llm import ChatModel
from memory_service.longterm.base import LongTermMemory
from memory_service.longterm.vector_cache import VectorCaches
from memory_service.observe.telemetry import TimedEmbedder
from memory_service.paths import WorkspacePaths
from memory_service.pgdb import Database
from memory_service.pipeline.consolidation import Consolidator, MemoryMdFiles
from memory_service.pipeline.erasure import UserData, UserErasure
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.pipeline.idle_flush import IdleFlusher
from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance
from memory_service.pipeline.memory_docs import MemoryDocs
from memory_service.pipeline.replica_state import ReplicaState
from memory_service.pipeline.scheduler import MemoryMaintenanceScheduler, known_users
from memory_service.shortterm.eviction import ToolResultEvictor, ToolResultStore
from memory_service.shortterm.session import ShortTermMemory
from memory_service.shortterm.session_log import SessionLog, SessionLogStore
from memory_service.shortterm.store import AgentStateStore
from memory_service.tombstones import Tombstones

log = logging.getLogger(__name__)


def build_embedder(settings: Settings) -> Embedder:
    """The configured model on its backend, behind the vector cache; a model that cannot be
    loaded (or exported to ONNX) is a ``ConfigurationError`` naming the setting and the cause."""
    cfg = settings.embedding
    if cfg.backend == "onnx":
        inner = _onnx_embedder(settings)
    else:
        if cfg.quantize:
            raise ConfigurationError(
                "MEMORY_EMBEDDING__QUANTIZE: int8 quantisation needs MEMORY_EMBEDDING__BACKEND=onnx"
            )
        try:
            inner = SentenceTransformerEmbedder(
                cfg.model, device=cfg.device, batch_size=cfg.batch_size, num_threads=cfg.threads
            )
        except (OSError, ValueError) as exc:
            message = f"MEMORY_EMBEDDING__MODEL: cannot load {cfg.model!r}: {exc}"
            raise ConfigurationError(message) from exc
    inner = TimedEmbedder(inner)  # model time and batch sizes for /metrics, beneath the cache
    return CachedEmbedder(inner, max_entries=cfg.cache_entries) if cfg.cache_entries else inner


def _onnx_embedder(settings: Settings) -> Embedder:
    from indexing.onnx_cache import CacheDirError
    from indexing.onnx_embeddings import OnnxEmbedder

    cfg = settings.embedding
    if cfg.device != "cpu":
        raise ConfigurationError(
            f"MEMORY_EMBEDDING__DEVICE: {cfg.device!r} needs MEMORY_EMBEDDING__BACKEND=torch "
            "(the onnx backend runs on the CPU)"
        )
    try:
        return OnnxEmbedder(
            cfg.model,
            cache_dir=cfg.onnx_cache_dir,
            threads=cfg.threads,
            batch_size=cfg.batch_size,
            quantize=cfg.quantize,
        )
    except CacheDirError as exc:
        raise ConfigurationError(f"MEMORY_EMBEDDING__ONNX_CACHE_DIR: {exc}") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        message = (
            f"MEMORY_EMBEDDING__MODEL: cannot load {cfg.model!r} on the onnx backend: {exc} "
            "(MEMORY_EMBEDDING__BACKEND=torch runs it on sentence-transformers)"
        )
        raise ConfigurationError(message) from exc


def build_expiry(settings: Settings) -> ExpiryPolicy:
    """The one expiry rule: what reads hide and what maintenance deletes."""
    return ExpiryPolicy(by_importance=settings.longterm.expire_by_importance)


def build_longterm(settings: Settings, embedder: Embedder) -> LongTermMemory:
    cfg = settings.longterm
    retrieval = cfg.retrieval()
    read = {
        "retrieval": retrieval,
        "expiry": build_expiry(settings),
        "confidence": ConfidenceDecay(cfg.confidence_half_life_days, cfg.confidence_floor),
        "track_access": cfg.track_access,
        "access_flush_s": cfg.access_flush_seconds,
    }
    backend = cfg.backend
    if backend == "files":
        from memory_service.longterm.files import FileSystemLongTermMemory

        return FileSystemLongTermMemory(settings.workspace, embedder, **read)
    if backend == "qdrant":
        from memory_service.longterm.qdrant import open_qdrant

        return open_qdrant(settings.qdrant, settings.workspace, embedder, **read)
    raise ConfigurationError(
        f"MEMORY_LONGTERM__BACKEND: backend {backend!r} is not available in this build"
    )


def build_database(settings: Settings) -> Database | None:
    """The PostgreSQL that keeps this replica's state (``MEMORY_STATE__BACKEND``), or None
    when that state lives in the workspace. Unreachable: a start-up error naming the DSN."""
    if not settings.state_in_postgres:
        return None
    assert settings.postgres.dsn  # the settings' validator: postgres state needs a DSN
    return Database(
        settings.postgres.dsn,
        pool_min=settings.postgres.pool_min,
        pool_max=settings.postgres.pool_max,
        schema=settings.postgres.schema_name,
    )


def build_memory_docs(
    settings: Settings, database: Database | None, tombstones: Tombstones | None = None
) -> MemoryDocs:
    """Where MEMORY.md and its snapshots live: PostgreSQL for the Qdrant backend when replica
    state is there (``pipeline/memory_docs_pg.py`` says why, and how files move there);
    files otherwise (the files backend reads its MEMORY.md as facts)."""
    if database is not None and settings.longterm.backend == "qdrant":
        from memory_service.pipeline.memory_docs_pg import PostgresMemoryDocs

        docs = PostgresMemoryDocs(database, settings.workspace, tombstones=tombstones)
        docs.import_files(settings.workspace)  # files of a deployment before PostgreSQL state
        return docs
    return MemoryMdFiles(settings.workspace, tombstones=tombstones)


def build_state_store(settings: Settings) -> AgentStateStore:
    """The configured session-state store (files or PostgreSQL)."""
    cfg = settings.shortterm
    ttl = timedelta(hours=cfg.ttl_hours) if cfg.ttl_hours else None
    if cfg.backend == "files":
        from memory_service.shortterm.files_store import FileStateStore

        return FileStateStore(settings.workspace, ttl=ttl)
    if cfg.backend == "postgres":
        return _postgres_store(settings)
    raise ConfigurationError(f"MEMORY_SHORTTERM__BACKEND: unknown backend {cfg.backend!r}")


def _postgres_store(settings: Settings) -> AgentStateStore:
    cfg = settings.shortterm
    if not settings.postgres.dsn:
        raise ConfigurationError(
            "MEMORY_POSTGRES__DSN: required when MEMORY_SHORTTERM__BACKEND=postgres"
        )
    from memory_service.shortterm.postgres_store import PostgresStateStore

    return PostgresStateStore(
        settings.postgres.dsn,
        table=cfg.postgres_table,
        ttl=timedelta(hours=cfg.ttl_hours) if cfg.ttl_hours else None,
        pool_min=settings.postgres.pool_min,
        pool_max=settings.postgres.pool_max,
        tombstones=Tombstones(settings.workspace),
    )


def build_session_logs(
    settings: Settings, database: Database | None = None
) -> tuple[SessionLogStore, ToolResultStore]:
    """Session logs and evicted tool results: in ``database`` when replica state lives in
    PostgreSQL (``Services.database``), else in the workspace."""
    cfg = settings.shortterm
    sizes = {"max_chars": cfg.tool_result_max_chars, "preview_chars": cfg.tool_result_preview_chars}
    if database is None:
        return SessionLog(settings.workspace), ToolResultEvictor(settings.workspace, **sizes)
    from memory_service.shortterm.eviction_pg import PostgresToolResults
    from memory_service.shortterm.logs_from_files import move_workspace_logs
    from memory_service.shortterm.session_log_pg import PostgresSessionLog

    erased = Tombstones(settings.workspace, database=database)  # the replicas' shared ones
    logs = PostgresSessionLog(database, settings.workspace, tombstones=erased)
    results = PostgresToolResults(database, settings.workspace, tombstones=erased, **sizes)
    move_workspace_logs(settings.workspace, logs, results)  # those of a files deployment
    return logs, results


def build_shortterm(
    settings: Settings,
    memory_model: ChatModel | None,
    embedder: Embedder | None = None,
    database: Database | None = None,
) -> ShortTermMemory:
    """Sessions on the configured store; compaction uses ``memory_model`` (None: no LLM),
    or ``embedder`` for the importance policy; logs and tool results in ``database`` when
    given (``build_session_logs``)."""
    return ShortTermMemory(
        build_state_store(settings),
        *build_session_logs(settings, database),
        config=settings.compaction,
        model=memory_model,
        context_window=settings.llm.context_window,
        embedder=embedder,
    )


@dataclass
class Services:
    """Everything a request handler or CLI command needs, built from one Settings."""

    settings: Settings
    embedder: Embedder
    longterm: LongTermMemory
    chat_model: ChatModel | None = None  # None: no LLM configured
    memory_model: ChatModel | None = None  # flush/compaction model (shares chat_model's client)
    shortterm: ShortTermMemory | None = None
    flush: MemoryFlushManager | None = None  # facts out of conversations (see pipeline/flush)
    database: Database | None = None  # replica state in PostgreSQL (MEMORY_STATE__BACKEND)
    memory_docs: MemoryDocs | None = None  # MEMORY.md and snapshots (None: workspace files)

    def describe_backend(self) -> str:
        return self.settings.longterm.backend

    def describe_storage(self) -> str:
        """Where long-term facts and session state live, for the start-up line."""
        s = self.settings
        if s.longterm.backend == "files":
            longterm = f"files ({s.workspace.resolve()})"
        elif s.qdrant.url:
            longterm = f"qdrant server ({s.qdrant.url}, collection {s.qdrant.collection})"
        else:
            root = (
                s.qdrant.path
                if s.qdrant.path is not None
                else WorkspacePaths(s.workspace).qdrant_dir
            )
            longterm = f"qdrant edge ({(root / s.qdrant.collection).resolve()})"
        return f"long-term backend: {longterm} | short-term: {s.shortterm.backend}"

    @cached_property
    def state(self) -> ReplicaState:
        """Tombstones, usage, dead letters, maintenance markers: over ``database`` if any."""
        return ReplicaState.of(self.settings.workspace, self.database)

    def known_users(self, tenants: Iterable[str] = ()) -> Iterator[RuntimeContext]:
        """Users and shared scopes to maintain, wherever they are known (``known_users``)."""
        sources = self.state.user_sources(self.shortterm and self.shortterm.store)
        return known_users(self.settings.workspace, self.longterm, tenants, state=sources)

    def close(self) -> None:
        self.longterm.close()
        if self.shortterm is not None:
            self.shortterm.close()
        if self.database is not None:
            self.database.close()
        for model in (self.memory_model, self.chat_model):
            if model is not None:
                model.close()  # a model sharing another's client leaves it open


def build_services(settings: Settings, *, embedder: Embedder | None = None) -> Services:
    # an embedder handed in (tests, benchmarks) is timed too; build_embedder times its model
    embedder = TimedEmbedder(embedder) if embedder is not None else build_embedder(settings)
    database = build_database(settings)  # first: every store below may keep state in it
    try:
        services = Services(settings, embedder, build_longterm(settings, embedder))
    except BaseException:
        if database is not None:
            database.close()
        raise
    services.database = database
    try:
        state = services.state  # tables created here when missing
        services.memory_docs = build_memory_docs(settings, database, state.tombstones)
        services.chat_model = ChatModel.from_settings(settings.llm)
        if services.chat_model is not None:
            name = settings.llm.memory_model or settings.llm.model
            services.memory_model = services.chat_model.with_model(name)
        else:  # a memory model alone (no chat model) still serves compaction and flush
            services.memory_model = ChatModel.from_settings(settings.llm, memory=True)
        services.shortterm = build_shortterm(
            settings, services.memory_model, embedder, database=database
        )
        options = {"config": settings.memory, "docs": services.memory_docs, **state.flush_stores()}
        services.flush = MemoryFlushManager(
            services.longterm, services.memory_model, settings.workspace, **options
        )
        services.shortterm.set_flush(services.flush)  # before compaction and on overflow
    except BaseException:
        services.close()  # e.g. PostgreSQL unreachable: release the Qdrant Edge folder too
        raise
    return services


def build_maintenance(services: Services) -> MemoryMaintenance:
    """Maintenance over the running services (serve's scheduler, the CLI, the API)."""
    memory = services.settings.memory
    model = services.memory_model  # MEMORY_MEMORY__MODEL, if set, names the model to use
    consolidator = Consolidator(
        model=model.with_model(memory.model) if model is not None else None,
        max_tokens=memory.consolidation_max_tokens,
        prompt=memory.consolidation_prompt,
        docs=services.memory_docs,
    )
    return MemoryMaintenance(
        longterm=services.longterm,
        workspace=services.settings.workspace,
        consolidator=consolidator,
        settings=MaintenanceSettings(
            min_gap=memory.consolidation_min_gap,
            daily_file_retention_days=memory.daily_file_retention_days,
            session_retention_days=memory.session_retention_days,
            near_duplicate_distance=memory.near_duplicate_distance,
            expiry=build_expiry(services.settings),
        ),
        session_logs=services.shortterm.log if services.shortterm is not None else None,
        **services.state.maintenance_stores(),
    )


def build_scheduler(
    services: Services,
    maintenance: MemoryMaintenance,
    tenants: Callable[[], Iterable[str]] = tuple,
) -> MemoryMaintenanceScheduler:
    """``serve``'s background work: maintenance passes (without consolidation when
    ``disable_memory_hooks`` is on), the TTL purge of session states, and the idle flush of
    sessions that went quiet (``idle_flush_minutes``; needs the flush's model)."""
    memory = services.settings.memory
    hooks = not memory.disable_memory_hooks
    idle = None
    shortterm, flush = services.shortterm, services.flush
    if hooks and memory.idle_flush_minutes and shortterm and flush and flush.model:
        idle = IdleFlusher(shortterm, flush, idle=timedelta(minutes=memory.idle_flush_minutes))
    return MemoryMaintenanceScheduler(
        maintenance,
        lambda: services.known_users(tenants()),
        interval=timedelta(hours=memory.maintenance_interval_hours),
        consolidate=hooks,
        purge=shortterm.purge_expired if shortterm is not None else None,
        idle_flush=idle,
        sweep_interval=timedelta(minutes=memory.sweep_interval_minutes),
    )


def build_harness(services: Services) -> MemoryHarness:
    """The harness over the running services (cheap: build one per request)."""
    if services.shortterm is None:
        raise BackendUnavailableError("the chat endpoint needs short-term memory")
    return MemoryHarness(
        model=services.chat_model,
        shortterm=services.shortterm,
        longterm=services.longterm,
        workspace=services.settings.workspace,
        config=services.settings.memory,
        flush=services.flush,
        usage=services.state.usage,
        maintenance=build_maintenance(services),  # memory_consolidate and memory_prune
        docs=services.memory_docs,
    )


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
            from memory_service.longterm.files import FileSystemLongTermMemory

            files = FileSystemLongTermMemory(workspace, services.embedder)
            opened.append(files)
            longterm["files"] = files
        if "qdrant" not in longterm and _qdrant_reachable(settings):
            from memory_service.longterm.qdrant import open_qdrant

            qdrant = open_qdrant(settings.qdrant, workspace, services.embedder)
            opened.append(qdrant)
            longterm["qdrant"] = qdrant
        sessions: dict[str, UserData] = {settings.shortterm.backend: services.shortterm.store}
        if "files" not in sessions:
            from memory_service.shortterm.files_store import FileStateStore

            sessions["files"] = FileStateStore(workspace)
        if "postgres" not in sessions and settings.postgres.dsn:
            other = _postgres_store(settings)
            opened.append(other)
            sessions["postgres"] = other
    except BaseException:
        for store in opened:
            store.close()
        raise
    stores: list[tuple[str, UserData]] = [
        ("memory_md", MemoryMdFiles(workspace)),  # before the ledgers: not counted as facts
        ("vector_caches", VectorCaches(workspace)),
        *((f"facts.{name}", store) for name, store in longterm.items()),
        *((f"sessions.{name}", store) for name, store in sessions.items()),
        ("session_logs", services.shortterm.log),
        ("tool_results", services.shortterm.evictor),
        *_workspace_logs(services),
        ("dead_letters", services.state.dead_letters),
        ("maintenance", build_maintenance(services)),
        *services.state.left_in_workspace(workspace),  # from before a switch to PostgreSQL state
    ]
    if services.database is not None:  # MEMORY.md of the Qdrant backend (before a switch too)
        from memory_service.pipeline.memory_docs_pg import PostgresMemoryDocs

        stores.insert(1, ("memory_md.postgres", PostgresMemoryDocs(services.database, workspace)))
    closes = [store.close for store in opened]
    return UserErasure(workspace, stores, on_close=closes, tombstones=services.state.tombstones)


def _workspace_logs(services: Services) -> list[tuple[str, UserData]]:
    """With logs and tool results in PostgreSQL, the workspace's too (from before a switch)."""
    if services.database is None:
        return []
    ws = services.settings.workspace
    return [("session_logs.files", SessionLog(ws)), ("tool_results.files", ToolResultEvictor(ws))]


def _qdrant_reachable(settings: Settings) -> bool:
    """Whether this configuration names Qdrant data that outlives a process: a server, or an
    Edge folder that exists (qdrant-client's ``:memory:`` mode keeps nothing)."""
    cfg = settings.qdrant
    if cfg.url:
        return cfg.url != ":memory:"
    root = cfg.path if cfg.path is not None else WorkspacePaths(settings.workspace).qdrant_dir
    return (root / cfg.collection).is_dir()
