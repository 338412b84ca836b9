"""The files backend's embedding model, for the rule of ``store_embedder``: the record is
``<workspace>/embedder.json``; the vectors are the owners' caches, one file per model
(``vector_cache``), so a fact's vector "names" its model by the file it is in. A re-embed
fills each owner's cache of the new model from the fact files (every stored fact, as the
index reads them), batch by batch, each batch written before the next; facts already in it
are skipped, so a stopped re-embed goes on where it stopped. Once complete, the caches of the
model it left are deleted (nothing reads them)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexing.embeddings import Embedder
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.paths import OwnerPaths, WorkspacePaths, id_folders
from memory_service.longterm.files.index import build_index
from memory_service.longterm.files.owner_files import fact_files_signature, owners_with_fact_files
from memory_service.longterm.files.vector_cache import (
    load_vectors,
    model_cache_path,
    save_vectors,
)
from memory_service.longterm.store_embedder import EmbedderId, EmbedderRecord
from memory_service.stores.fsutil import read_text, write_atomically


@dataclass(slots=True)
class _Owner:
    """One owner's cache of the new model being filled: what it holds, what is missing."""

    cache: Path
    known: dict[str, np.ndarray]
    missing: list[tuple[str, str]] = field(default_factory=list)  # (content hash, text)


class FilesEmbedderRecords:
    """``EmbedderRecords`` of a workspace's fact files."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.path = WorkspacePaths(self.workspace).embedder_record
        self.description = f"the files store in {self.workspace}"
        self._owners: Iterator[RuntimeContext] | None = None
        self._current: _Owner | None = None

    def read(self) -> EmbedderRecord | None:
        text = read_text(self.path)
        return EmbedderRecord.from_json(text, self.description) if text.strip() else None

    def write(self, record: EmbedderRecord) -> None:
        write_atomically(self.path, record.to_json() + "\n")

    def stale(self, embedder: EmbedderId) -> int:
        return sum(len(self._owner(ctx, embedder).missing) for ctx in self.owners())

    def reembed(self, embedder: Embedder, limit: int) -> int:
        """Up to ``limit`` missing facts of the owners in turn, each owner's share written to
        its cache before this returns."""
        model = EmbedderId.of(embedder)
        if self._owners is None:
            self._owners = iter(self.owners())
        done = 0
        while done < limit:
            owner = self._current
            if owner is None or not owner.missing:
                ctx = next(self._owners, None)
                if ctx is None:
                    break
                owner = self._current = self._owner(ctx, model)
                continue
            batch, owner.missing = owner.missing[: limit - done], owner.missing[limit - done :]
            vectors = embedder.embed([text for _, text in batch])
            owner.known.update((h, v) for (h, _), v in zip(batch, vectors, strict=True))
            save_vectors(owner.cache, owner.known)
            done += len(batch)
        return done

    def finish(self, previous: EmbedderId | None) -> None:
        if previous is None:
            return
        for ctx in self.owners():
            paths = OwnerPaths.of(self.workspace, ctx)
            model_cache_path(paths, previous.model, previous.dimension).unlink(missing_ok=True)

    def owners(self) -> list[RuntimeContext]:
        """Every owner with fact files: each tenant's users, agents and shared memory."""
        where = WorkspacePaths(self.workspace)
        found: list[RuntimeContext] = []
        for tenant in id_folders(where.tenants_dir):
            users = owners_with_fact_files(
                where.users_dir(tenant), lambda n, t=tenant: self._paths(RuntimeContext(t, n))
            )
            agents = owners_with_fact_files(
                where.agents_dir(tenant),
                lambda n, t=tenant: self._paths(scope_context(t, "agent", n)),
            )
            found += [RuntimeContext(tenant, u) for u in users]
            found += [scope_context(tenant, "agent", a) for a in agents]
            shared = scope_context(tenant, "tenant")
            if fact_files_signature(self._paths(shared)):
                found.append(shared)
        return found

    def _paths(self, ctx: RuntimeContext) -> OwnerPaths:
        return OwnerPaths.of(self.workspace, ctx)

    def _owner(self, ctx: RuntimeContext, model: EmbedderId) -> _Owner:
        """The owner's cache of ``model`` and its stored facts that it lacks (one per text)."""
        paths = self._paths(ctx)
        index = build_index(ctx, paths, fact_files_signature(paths), None)
        cache = model_cache_path(paths, model.model, model.dimension)
        known = load_vectors(cache, model.dimension)
        missing: dict[str, str] = {}
        for item in index.stored:
            fact = item.fact
            if fact.content_hash not in known:
                missing.setdefault(fact.content_hash, fact.text)
        return _Owner(cache, known, list(missing.items()))
