"""The collection's layout, the same in both engines: one collection for all tenants, named
vectors ``dense`` (cosine) and sparse ``bm25`` (IDF modifier), payload ``tenant_id`` (keyword
index, tenant flag) and the owner's fields (``user_id``; ``scope``/``agent_id`` on shared facts)
plus the fact's (``payload.payload_of``) and the tokenizer version of its sparse vector
(``terms_version``) and the embedding model of its dense vector (``embedder``), with a payload
index on every field a read tests."""

from __future__ import annotations

from memory_service.domain.errors import ConfigurationError

DENSE = "dense"
SPARSE = "bm25"
TENANT_FIELD = "tenant_id"
USER_FIELD = "user_id"
SCOPE_FIELD = "scope"  # "agent" | "tenant" on shared facts ("user", or absent, on a user's)
AGENT_FIELD = "agent_id"
# The tokenizer version (``indexing.tokenize.TOKENIZER_VERSION``) a point's sparse vector was
# made with: a point whose version is another (or none: made before versions were recorded)
# has its sparse vector made again when the collection is opened (``QdrantLongTermMemory``).
TERMS_FIELD = "terms_version"
# The embedding model (``Embedder.name``) a point's dense vector was made with: a re-embed
# (``store_embedder.reembed``) takes the points that name another model, or none (written
# before points named theirs), and stamps each as its new vector lands, so a stopped re-embed
# goes on where it stopped. Read only then: no payload index.
EMBEDDER_FIELD = "embedder"
# The collection's own record of its model (``store_embedder.EmbedderRecord``, as JSON): in
# the collection's metadata on a server, in a file beside the folder for Edge.
EMBEDDER_RECORD = "memory_service_embedder"
# Payload indexes: the tenant index first; then every field a recall or record filter tests.
# Without the state and expiry indexes, Edge checks them point by point (several times slower:
# RESULTS.md, "Costs behind the code's choices"). kind, tags, importance and created_at serve
# the caller's filters (``FactFilter``) and the expiry by importance.
PAYLOAD_INDEXES: dict[str, str] = {
    TENANT_FIELD: "tenant",
    USER_FIELD: "keyword",
    SCOPE_FIELD: "keyword",
    AGENT_FIELD: "keyword",
    "key": "keyword",
    "superseded_by": "keyword",
    "valid_to": "datetime",
    "expires_at": "datetime",
    "kind": "keyword",
    "tags": "keyword",
    "importance": "integer",
    "created_at": "datetime",
    TERMS_FIELD: "integer",  # the open's look for points an older tokenizer indexed
}


def reindex_hint(where: str) -> str:
    return (
        f"re-index: export with the old embedding model still configured "
        f"(memory-service export --tenant T > facts.jsonl, for each tenant), remove {where}, "
        f"then import with the new model (memory-service import < facts.jsonl)"
    )


def check_dense_size(stored: int | None, dimension: int, where: str) -> None:
    """Refuse a collection whose dense vectors do not match the embedder."""
    if stored is None:
        raise ConfigurationError(
            f"{where} has no '{DENSE}' vector: it was not created by memory-service; "
            f"point MEMORY_QDRANT__COLLECTION elsewhere or {reindex_hint(where)}"
        )
    if stored != dimension:
        raise ConfigurationError(
            f"{where} stores {stored}-dimensional dense vectors but the embedding model "
            f"makes {dimension}-dimensional ones (MEMORY_EMBEDDING__MODEL changed?); "
            f"{reindex_hint(where)}"
        )
