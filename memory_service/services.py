"""Build the configured backends once, from Settings alone (no code changes to swap them)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from indexing.embeddings import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from memory_service.config import Settings
from memory_service.errors import ConfigurationError
from memory_service.llm import ChatModel
from memory_service.longterm.base import LongTermMemory
from memory_service.longterm.retrieval import preset
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.shortterm.factory import build_shortterm
from memory_service.shortterm.session import ShortTermMemory

log = logging.getLogger(__name__)


def build_embedder(settings: Settings) -> Embedder:
    cfg = settings.embedding
    try:
        inner = SentenceTransformerEmbedder(
            cfg.model, device=cfg.device, batch_size=cfg.batch_size, num_threads=cfg.threads
        )
    except (OSError, ValueError) as exc:
        message = f"MEMORY_EMBEDDING__MODEL: cannot load {cfg.model!r}: {exc}"
        raise ConfigurationError(message) from exc
    return CachedEmbedder(inner, max_entries=cfg.cache_entries) if cfg.cache_entries else inner


def build_longterm(settings: Settings, embedder: Embedder) -> LongTermMemory:
    retrieval = preset(settings.longterm.retrieval_preset)
    backend = settings.longterm.backend
    if backend == "files":
        from memory_service.longterm.files import FileSystemLongTermMemory

        return FileSystemLongTermMemory(settings.workspace, embedder, retrieval=retrieval)
    if backend == "qdrant":
        from memory_service.longterm.qdrant import open_qdrant

        return open_qdrant(settings.qdrant, settings.workspace, embedder, retrieval=retrieval)
    raise ConfigurationError(
        f"MEMORY_LONGTERM__BACKEND: backend {backend!r} is not available in this build"
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
            root = s.qdrant.path if s.qdrant.path is not None else s.workspace / "qdrant"
            longterm = f"qdrant edge ({(root / s.qdrant.collection).resolve()})"
        return f"long-term backend: {longterm} | short-term: {s.shortterm.backend}"

    def close(self) -> None:
        self.longterm.close()
        if self.shortterm is not None:
            self.shortterm.close()
        for model in (self.memory_model, self.chat_model):
            if model is not None:
                model.close()  # a model sharing another's client leaves it open


def build_services(settings: Settings, *, embedder: Embedder | None = None) -> Services:
    embedder = embedder or build_embedder(settings)
    services = Services(settings, embedder, build_longterm(settings, embedder))
    try:
        services.chat_model = ChatModel.from_settings(settings.llm)
        if services.chat_model is not None:
            name = settings.llm.memory_model or settings.llm.model
            services.memory_model = services.chat_model.with_model(name)
        else:  # a memory model alone (no chat model) still serves compaction and flush
            services.memory_model = ChatModel.from_settings(settings.llm, memory=True)
        services.shortterm = build_shortterm(settings, services.memory_model)
        services.flush = MemoryFlushManager(
            services.longterm, services.memory_model, settings.workspace, config=settings.memory
        )
        services.shortterm.set_flush(services.flush)  # before compaction and on overflow
    except BaseException:
        services.close()  # e.g. PostgreSQL unreachable: release the Qdrant Edge folder too
        raise
    return services
