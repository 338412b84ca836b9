"""``Services``: everything a request handler or CLI command needs, and ``build_services``,
which builds it from one ``Settings`` in the order the stores depend on each other."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from indexing.embeddings import Embedder
from memory_service.config.settings import Settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.paths import WorkspacePaths
from memory_service.domain.redaction import Redactor
from memory_service.llm import ChatModel
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.telemetry import TimedEmbedder
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.pipeline.scheduler import known_users, tenant_owners
from memory_service.pipeline.session_archive import SessionArchiver
from memory_service.services.stores import (
    build_embedder,
    build_longterm,
    build_redactor,
    build_shortterm,
)
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.build import ReplicaStores, open_database
from memory_service.stores.database import Database, describe_dsn
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.stores.user_data import ListsUsers
from memory_service.usecases.base import Memories


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
        elif s.longterm.backend == "postgres":
            schema = s.postgres.schema_name or "public"
            longterm = f"postgres ({describe_dsn(s.postgres.dsn or '')}, schema {schema})"
        elif s.qdrant.url:
            longterm = f"qdrant server ({s.qdrant.url}, collection {s.qdrant.collection})"
        else:
            root = (
                s.qdrant.path
                if s.qdrant.path is not None
                else WorkspacePaths(s.workspace).qdrant_dir
            )
            longterm = f"qdrant edge ({(root / s.qdrant.collection).resolve()})"
        state = " | replica state: postgres" if s.state_in_postgres else ""
        return f"long-term backend: {longterm} | short-term: {s.shortterm.backend}{state}"

    @property
    def memories(self) -> Memories:
        """What the use cases act on (``memory_service.usecases``), as this service holds it."""
        return Memories(self.longterm, self.settings.workspace, self.shortterm, self.memory_docs)

    @cached_property
    def redactor(self) -> Redactor:
        """The redaction rule the stores apply, for checks made before a write (an import's
        lines)."""
        return build_redactor(self.settings)

    @cached_property
    def state(self) -> ReplicaStores:
        """Tombstones, usage, dead letters, maintenance markers: over ``database`` if any
        (``build_services`` sets it before the stores that check the tombstones)."""
        return ReplicaStores.of(self.settings.workspace, self.database)

    def known_users(self, tenants: Iterable[str] = ()) -> Iterator[RuntimeContext]:
        """Users and shared scopes to maintain, wherever they are known (``known_users``)."""
        sources = self.state.user_sources(self.shortterm and self.shortterm.store)
        return known_users(self.settings.workspace, self.longterm, tenants, state=sources)

    def tenant_owners(self, tenant_id: str) -> list[RuntimeContext]:
        """One tenant's users and shared scopes, wherever they are known (the inspector's
        list of users): ``known_users``' rule for that tenant alone."""
        sources = self.state.user_sources(self.shortterm and self.shortterm.store)
        stores = [*sources, *([self.longterm] if isinstance(self.longterm, ListsUsers) else [])]
        where = WorkspacePaths(self.settings.workspace)
        return list(tenant_owners(where, self.longterm, tenant_id, stores))

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
    """The service from ``settings``: the replica state first (its database, if any, and the
    erased users' tombstones every store checks), then the backends, models and pipeline."""
    # an embedder handed in (tests, benchmarks) is timed too; build_embedder times its model
    embedder = TimedEmbedder(embedder) if embedder is not None else build_embedder(settings)
    database = open_database(settings)  # first: every store below may keep state in it
    try:
        state = ReplicaStores.of(settings.workspace, database)  # tables created when missing
        longterm = build_longterm(settings, embedder, state.tombstones, database)
    except BaseException:
        if database is not None:
            database.close()
        raise
    services = Services(settings, embedder, longterm, database=database)
    services.state = state  # every store below refuses the same erased users
    try:
        services.memory_docs = state.memory_docs(settings)
        services.chat_model = ChatModel.from_settings(settings.llm)
        if services.chat_model is not None:
            name = settings.llm.memory_model or settings.llm.model
            services.memory_model = services.chat_model.with_model(name)
        else:  # a memory model alone (no chat model) still serves compaction and flush
            services.memory_model = ChatModel.from_settings(settings.llm, memory=True)
        services.shortterm = build_shortterm(settings, services.memory_model, embedder, state)
        options = {"config": settings.memory, "docs": services.memory_docs, **state.flush_stores()}
        services.flush = MemoryFlushManager(
            services.longterm, services.memory_model, settings.workspace, **options
        )
        services.shortterm.set_flush(services.flush)  # before compaction and on overflow
        archive = settings.memory.session_archive
        if not settings.memory.disable_memory_hooks and (
            archive == "always" or (archive == "no_model" and services.memory_model is None)
        ):
            services.shortterm.set_archive(SessionArchiver(services.longterm))
    except BaseException:
        services.close()  # e.g. PostgreSQL unreachable: release the Qdrant Edge folder too
        raise
    return services
