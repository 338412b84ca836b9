"""Embeddings of one user's facts kept on disk, keyed by content hash.

The Markdown fact files are the source of truth and the index is derived from them; but
re-embedding every fact of every user after a restart costs seconds per thousand facts. This
file (``<user>/.index/vectors-<model>.npz``) lets a restarted process skip that. It is only a
cache: a missing, stale or unreadable file is rebuilt, and a fact whose text changed has a new
hash and is embedded again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from indexing.embeddings import Embedder
from memory_service.domain.context import RuntimeContext
from memory_service.domain.paths import OwnerPaths
from memory_service.stores.fsutil import ensure_dir, write_bytes_atomically

log = logging.getLogger(__name__)


def cache_path(paths: OwnerPaths, embedder: Embedder) -> Path:
    """The user's vector cache for this embedder (model name and dimension, hashed)."""
    return model_cache_path(paths, embedder.name, embedder.dimension)


def model_cache_path(paths: OwnerPaths, model: str, dimension: int) -> Path:
    """The user's vector cache for the model named ``model`` making ``dimension`` floats."""
    return paths.vector_cache(hashlib.sha256(f"{model}:{dimension}".encode()).hexdigest()[:12])


def load_vectors(path: Path, dimension: int) -> dict[str, np.ndarray]:
    """The cache file's vectors by content hash ({}: none, or not readable as this model's)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            hashes, vectors = data["hashes"], data["vectors"]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        log.warning("ignoring unreadable vector cache %s: %s", path, exc)
        return {}
    if vectors.ndim != 2 or vectors.shape[1] != dimension or len(hashes) != len(vectors):
        return {}
    return {str(h): v for h, v in zip(hashes, vectors, strict=True)}


def embed_with_cache(
    path: Path, embedder: Embedder, hashes: Sequence[str], texts: Sequence[str]
) -> np.ndarray:
    """Vectors for ``texts`` (one per row), reading and refreshing the cache file at ``path``.

    The file is rewritten only when something had to be embedded, and then holds exactly the
    facts asked for (deleted facts drop out)."""
    known = load_vectors(path, embedder.dimension)
    missing = [i for i, h in enumerate(hashes) if h not in known]
    if missing:
        fresh = embedder.embed([texts[i] for i in missing])
        for i, vector in zip(missing, fresh, strict=True):
            known[hashes[i]] = vector
    matrix = np.zeros((len(hashes), embedder.dimension), dtype=np.float32)
    for i, h in enumerate(hashes):
        matrix[i] = known[h]
    if missing:
        _save(path, hashes, matrix)
    return matrix


def add_vectors(path: Path, dimension: int, vectors: Mapping[str, np.ndarray]) -> None:
    """Add freshly embedded vectors (content hash -> vector) to the cache file at ``path``.

    Record embeds every new fact before it writes; keeping those vectors here means the next
    index build reads them back instead of embedding again, so no in-memory cache has to hold
    every recorded fact until its user is next searched (it held 100k vectors at 100k facts)."""
    if not vectors:
        return
    known = load_vectors(path, dimension)
    known.update(vectors)
    hashes = list(known)
    _save(path, hashes, np.stack([known[h] for h in hashes]).astype(np.float32, copy=False))


def save_vectors(path: Path, vectors: Mapping[str, np.ndarray]) -> None:
    """Write the cache file at ``path`` holding ``vectors`` (content hash -> vector) alone."""
    hashes = list(vectors)
    _save(path, hashes, np.stack([vectors[h] for h in hashes]).astype(np.float32, copy=False))


def _save(path: Path, hashes: Sequence[str], matrix: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, hashes=np.asarray(hashes, dtype="U64"), vectors=matrix)
    ensure_dir(path.parent)
    write_bytes_atomically(path, buffer.getvalue())


class VectorCaches:
    """A workspace's vector caches, as erasure sees them (every model's of one user)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)

    def count_user(self, ctx: RuntimeContext) -> int:
        return len(OwnerPaths.of(self.workspace, ctx).vector_caches())

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's vector caches (and their folder when it is left empty)."""
        paths = OwnerPaths.of(self.workspace, ctx)
        found = paths.vector_caches()
        for path in found:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # absent, or holding something else
            paths.index_dir.rmdir()
        return len(found)
