"""Opening a Qdrant Edge shard: its layout checked against this configuration (dense size,
the sparse leg's IDF modifier), payload indexes made if missing, and Edge's own errors turned
into ones that name the folder and say what to do."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from memory_service.domain.errors import (
    BackendUnavailableError,
    ConfigurationError,
    MemoryServiceError,
)
from memory_service.longterm.qdrant.edge.folder_lock import FolderOwner
from memory_service.longterm.qdrant.layout import (
    DENSE,
    PAYLOAD_INDEXES,
    SPARSE,
    check_dense_size,
    reindex_hint,
)
from memory_service.stores.fsutil import ensure_dir

CONFIG_FILE = "edge_config.json"


# A new shard stores its dense vectors as float16: half the bytes of float32 in memory and on
# disk (counted twice in RSS: Edge maps the file twice), scores within ~1e-4 of float32 and
# recall measured the same (benchmarks/RESULTS.md, "Costs behind the code's choices"). A shard made
# with float32 keeps it (Edge refuses to load a shard under another datatype) until an erase
# rebuilds it (``EdgeEngine.rewrite_without_deleted`` opens a new shard).
NEW_DATATYPE = "float16"
_DATATYPES = {
    "float16": qe.VectorStorageDatatype.Float16,
    "float32": qe.VectorStorageDatatype.Float32,
}


# One search thread: every query of the service is filtered to one owner's points, a few
# hundred, which one thread scores in microseconds, while handing a batch to a pool of one per
# core and waking it cost more than the search itself (benchmarks/RESULTS.md, "Costs behind
# the code's choices").
SEARCH_THREADS = 1


def _config(dimension: int, datatype: str) -> qe.EdgeConfig:
    dense = qe.EdgeVectorParams(
        size=dimension, distance=qe.Distance.Cosine, datatype=_DATATYPES[datatype]
    )
    return qe.EdgeConfig(
        vectors={DENSE: dense},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        max_search_threads=SEARCH_THREADS,
    )


def stored_datatype(folder: Path) -> str:
    """The dense vectors' datatype of the shard in ``folder``."""
    return _datatype_of(_stored_layout(folder))


def _datatype_of(layout: dict[str, Any]) -> str:
    """float32 when the config names none: Edge's default, and every shard made before
    float16."""
    dense = (layout.get("vectors") or {}).get(DENSE) or {}
    return str(dense.get("datatype") or "float32").lower()


def _stored_layout(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the Qdrant Edge config in {folder}: {exc}") from exc


def _check_layout(folder: Path, dimension: int) -> None:
    layout = _stored_layout(folder)
    where = f"the Qdrant Edge folder {folder}"
    dense = (layout.get("vectors") or {}).get(DENSE) or {}
    check_dense_size(dense.get("size"), dimension, where)
    datatype = _datatype_of(layout)
    if datatype not in _DATATYPES:
        raise ConfigurationError(
            f"{where} stores its vectors as {datatype!r}, not float16 or float32; "
            f"{reindex_hint(where)}"
        )
    sparse = (layout.get("sparse_vectors") or {}).get(SPARSE)
    if sparse is None or str(sparse.get("modifier", "")).lower() != "idf":
        raise ConfigurationError(
            f"{where} has no sparse '{SPARSE}' vector with the IDF modifier; {reindex_hint(where)}"
        )


def in_use_error(folder: Path, owner: FolderOwner) -> BackendUnavailableError:
    """One line for the operator who started a second process on the folder (never an API
    client: engines open before a server serves)."""
    who = f", {owner.describe()}," if owner.pid is not None else ""
    todo = "stop it or do this through its HTTP API" if owner.is_server else "let it finish"
    return BackendUnavailableError(
        f"the Qdrant Edge folder {folder} is in use by another process{who} and one process "
        f"owns an Edge folder: {todo}; to run both, set MEMORY_QDRANT__URL to a Qdrant server "
        "(shared by many processes) or give each its own MEMORY_QDRANT__PATH"
    )


def _open_error(folder: Path, exc: Exception) -> MemoryServiceError:
    message = str(exc)
    if "WouldBlock" in message or "Can't init WAL" in message:  # an owner without our lock
        return in_use_error(folder, FolderOwner())
    if "ncompatible" in message:
        where = f"the Qdrant Edge folder {folder}"
        return ConfigurationError(
            f"{where} does not match this configuration ({message}); {reindex_hint(where)}"
        )
    return BackendUnavailableError(f"cannot open the Qdrant Edge folder {folder}: {message}")


def _index_schema(kind: str) -> Any:
    if kind == "tenant":
        return qe.KeywordIndexParams(is_tenant=True)
    if kind == "datetime":
        return qe.PayloadSchemaType.Datetime
    if kind == "integer":
        return qe.PayloadSchemaType.Integer
    return qe.PayloadSchemaType.Keyword


# Edge maps a shard's small files (each payload index's flags and value pages, the deleted
# flags) advised as random access, reads them whole as it loads, one 4 KB page a fault, and
# then drops them from the page cache: every load of a shard read ~90 MB a page at a time,
# about half a second on this project's machines even for an empty shard, and a rewrite's
# swap holds every call off through one. Read ahead first, the same load takes tens of
# milliseconds (benchmarks/RESULTS.md). The storage's large pages are left to the searches.
READ_AHEAD_MAX_BYTES = 4 << 20


def read_ahead(folder: Path) -> None:
    """Ask the kernel to read the shard's small files into the page cache, in large reads and
    in the background (``POSIX_FADV_WILLNEED``); nothing where the call does not exist."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:  # gone meanwhile: Edge's own to manage
                continue
            try:
                if os.fstat(fd).st_size <= READ_AHEAD_MAX_BYTES:
                    advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass  # a hint only
            finally:
                os.close(fd)


def open_shard(folder: Path, dimension: int) -> qe.EdgeShard:
    """Load the shard in ``folder`` after checking its layout, or create it."""
    try:
        if (folder / CONFIG_FILE).is_file():
            _check_layout(folder, dimension)
            read_ahead(folder)
            shard = qe.EdgeShard.load(str(folder), _config(dimension, stored_datatype(folder)))
        else:
            ensure_dir(folder)
            shard = qe.EdgeShard.create(str(folder), _config(dimension, NEW_DATATYPE))
    except MemoryServiceError:
        raise
    except Exception as exc:  # qdrant_edge raises plain Exception
        raise _open_error(folder, exc) from exc
    try:
        indexed = set(shard.info().payload_schema)
        missing = [name for name in PAYLOAD_INDEXES if name not in indexed]
        for name in missing:
            kind = PAYLOAD_INDEXES[name]
            shard.update(qe.UpdateOperation.create_field_index(name, _index_schema(kind)))
        if missing:  # a load that changed nothing has nothing to flush (a rewrite's swap waits)
            shard.flush()
    except Exception:
        shard.close()
        raise
    return shard


def copy_of_empty(folder: Path, template: Path, dimension: int) -> qe.EdgeShard:
    """A new, empty shard in ``folder``, copied from the one kept in ``template`` (made there
    first when missing or of another layout). Why a copy: Edge creates a shard and each of its
    payload indexes holding the GIL, seconds in all, which froze every thread of the process
    at each rewrite of the shard; copying the empty one's files is plain I/O, and loading the
    copy tens of milliseconds."""
    if not _is_empty_shard(template, dimension):
        shutil.rmtree(template, ignore_errors=True)
        making = template.with_name(template.name + ".making")
        shutil.rmtree(making, ignore_errors=True)
        shard = open_shard(making, dimension)
        shard.flush()
        shard.close()
        os.rename(making, template)
    shutil.copytree(template, folder)
    return open_shard(folder, dimension)


def _is_empty_shard(template: Path, dimension: int) -> bool:
    """Whether ``template`` holds a shard a new one may be copied from: this layout, the new
    shards' datatype."""
    if not (template / CONFIG_FILE).is_file():
        return False
    try:
        _check_layout(template, dimension)
        return stored_datatype(template) == NEW_DATATYPE
    except ConfigurationError:
        return False
