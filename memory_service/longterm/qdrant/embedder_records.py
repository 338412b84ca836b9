"""A Qdrant collection's embedding model, for the rule of ``store_embedder``: the record is
the engine's (the collection's metadata on a server, a file beside an Edge folder), and each
point names the model of its dense vector (``layout.EMBEDDER_FIELD``), so a re-embed takes
the points that name another one and stamps each batch as its vectors land."""

from __future__ import annotations

from dataclasses import replace

from indexing.embeddings import Embedder
from memory_service.longterm.qdrant.engine import QdrantEngine
from memory_service.longterm.qdrant.payload import fact_of
from memory_service.longterm.store_embedder import EmbedderId, EmbedderRecord


class QdrantEmbedderRecords:
    """``EmbedderRecords`` of one collection, through its engine."""

    def __init__(self, engine: QdrantEngine) -> None:
        self.engine = engine
        self.description = engine.description

    def read(self) -> EmbedderRecord | None:
        text = self.engine.embedder_record()
        return None if text is None else EmbedderRecord.from_json(text, self.description)

    def write(self, record: EmbedderRecord) -> None:
        self.engine.write_embedder_record(record.to_json())

    def stale(self, embedder: EmbedderId) -> int:
        return self.engine.count_stale_dense(embedder.model)

    def reembed(self, embedder: Embedder, limit: int) -> int:
        """One batch: the dense vector of each fact's text (what a record embeds), written
        with the model's name; a batch cut short by a kill is found stale again."""
        points = self.engine.stale_dense(embedder.name, limit)
        if not points:
            return 0
        vectors = embedder.embed([fact_of(p.id, p.payload).text for p in points])
        fresh = [replace(p, dense=v.tolist()) for p, v in zip(points, vectors, strict=True)]
        self.engine.set_dense(fresh, embedder.name)
        return len(points)

    def finish(self, previous: EmbedderId | None) -> None:
        """Nothing to drop: each point held one dense vector, now the new model's."""
