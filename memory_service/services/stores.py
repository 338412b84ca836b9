"""The stores of the service, each built from ``Settings``: the embedder, the long-term
backend, the replica-state database, MEMORY.md's documents, session states, logs and tool
results. Which class each one is depends on configuration alone (``MEMORY_*__BACKEND``)."""

from __future__ import annotations

from datetime import timedelta

from indexing.embeddings import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from memory_service.config import Settings
from memory_service.errors import ConfigurationError
from memory_service.fact_filter import ConfidenceDecay, ExpiryPolicy
from memory_service.llm import ChatModel
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.telemetry import TimedEmbedder
from memory_service.pgdb import Database
from memory_service.pipeline.consolidation import MemoryMdFiles
from memory_service.pipeline.memory_docs import MemoryDocs
from memory_service.shortterm.eviction import ToolResultEvictor, ToolResultStore
from memory_service.shortterm.session import ShortTermMemory
from memory_service.shortterm.session_log import SessionLog, SessionLogStore
from memory_service.shortterm.store import AgentStateStore
from memory_service.tombstones import Tombstones


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


def build_longterm(
    settings: Settings, embedder: Embedder, tombstones: Tombstones | None = None
) -> LongTermMemory:
    """The configured long-term backend; ``tombstones``: the erased users' (default: the
    workspace's; ``Services.state`` passes the replicas' shared ones)."""
    cfg = settings.longterm
    retrieval = cfg.retrieval()
    read = {
        "retrieval": retrieval,
        "expiry": build_expiry(settings),
        "confidence": ConfidenceDecay(cfg.confidence_half_life_days, cfg.confidence_floor),
        "track_access": cfg.track_access,
        "access_flush_s": cfg.access_flush_seconds,
        "tombstones": tombstones,
    }
    backend = cfg.backend
    if backend == "files":
        from memory_service.longterm.files.backend import FileSystemLongTermMemory

        return FileSystemLongTermMemory(settings.workspace, embedder, **read)
    if backend == "qdrant":
        from memory_service.longterm.qdrant.backend import open_qdrant

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


def build_state_store(settings: Settings, tombstones: Tombstones | None = None) -> AgentStateStore:
    """The configured session-state store (files or PostgreSQL)."""
    cfg = settings.shortterm
    ttl = timedelta(hours=cfg.ttl_hours) if cfg.ttl_hours else None
    if cfg.backend == "files":
        from memory_service.shortterm.files_store import FileStateStore

        return FileStateStore(settings.workspace, ttl=ttl, tombstones=tombstones)
    if cfg.backend == "postgres":
        return _postgres_store(settings, tombstones)
    raise ConfigurationError(f"MEMORY_SHORTTERM__BACKEND: unknown backend {cfg.backend!r}")


def _postgres_store(settings: Settings, tombstones: Tombstones | None = None) -> AgentStateStore:
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
        schema=settings.postgres.schema_name,
        tombstones=tombstones if tombstones is not None else Tombstones(settings.workspace),
    )


def build_session_logs(
    settings: Settings, database: Database | None = None, tombstones: Tombstones | None = None
) -> tuple[SessionLogStore, ToolResultStore]:
    """Session logs and evicted tool results: in ``database`` when replica state lives in
    PostgreSQL (``Services.database``), else in the workspace; ``tombstones``: the erased
    users' (default: those beside the logs)."""
    cfg = settings.shortterm
    sizes = {"max_chars": cfg.tool_result_max_chars, "preview_chars": cfg.tool_result_preview_chars}
    if database is None:
        return (
            SessionLog(settings.workspace, tombstones=tombstones),
            ToolResultEvictor(settings.workspace, tombstones=tombstones, **sizes),
        )
    from memory_service.shortterm.eviction_pg import PostgresToolResults
    from memory_service.shortterm.logs_from_files import move_workspace_logs
    from memory_service.shortterm.session_log_pg import PostgresSessionLog

    erased = tombstones or Tombstones(settings.workspace, database=database)  # shared ones
    logs = PostgresSessionLog(database, settings.workspace, tombstones=erased)
    results = PostgresToolResults(database, settings.workspace, tombstones=erased, **sizes)
    move_workspace_logs(settings.workspace, logs, results)  # those of a files deployment
    return logs, results


def build_shortterm(
    settings: Settings,
    memory_model: ChatModel | None,
    embedder: Embedder | None = None,
    database: Database | None = None,
    tombstones: Tombstones | None = None,
) -> ShortTermMemory:
    """Sessions on the configured store; compaction uses ``memory_model`` (None: no LLM),
    or ``embedder`` for the importance policy; logs and tool results in ``database`` when
    given (``build_session_logs``)."""
    return ShortTermMemory(
        build_state_store(settings, tombstones),
        *build_session_logs(settings, database, tombstones),
        config=settings.compaction,
        model=memory_model,
        context_window=settings.llm.context_window,
        embedder=embedder,
    )
