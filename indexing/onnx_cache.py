"""The exported ONNX files, cached on disk: keyed by the model's content, verified on every load.

A cache entry is ``<key>.onnx`` plus ``<key>.onnx.sha256`` (the hex digest of the first). The
key hashes the files the network is exported from (its config and weights) with the export
format, so a changed model never meets an old export. Both files are written atomically (temp
file, fsync, ``os.replace``); on load the bytes are hashed and compared before they reach
onnxruntime, so a torn or corrupted file is rebuilt, never served. Builds take a file lock, so
concurrent starts export once.

Hashing the 90 MB of weights and the 90 MB export costs ~0.2 s each (measured on the 2-core dev
machine); a process that builds its embedder again (the CLI's commands in one test process,
``bench`` over several backends) reuses a digest while the file's stamp (size, mtime, ctime,
inode) is unchanged: a file replaced or written in place gets a new stamp and is hashed again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_CHUNK = 1 << 20

Stamp = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode
_digests: dict[tuple, str] = {}  # (what was hashed, stamps) -> hex digest
_digests_lock = threading.Lock()


def _stamp(path: Path) -> Stamp:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _remembered(key: tuple, compute: Callable[[], str]) -> str:
    with _digests_lock:
        known = _digests.get(key)
    if known is None:
        known = compute()
        with _digests_lock:
            _digests[key] = known
    return known


class CacheDirError(OSError):
    """The cache folder cannot be created, read or written; the message names it."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memory-service/onnx`` (``~/.cache/...``): shared by every workspace,
    as the key is the model's content, not where it was used."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "memory-service" / "onnx"


def files_digest(files: Sequence[Path], root: Path, *, salt: str) -> str:
    """SHA-256 over ``salt`` and each file's path below ``root``, size and content."""
    ordered = sorted(files)
    key = ("files", str(root), salt, tuple((str(p), _stamp(p)) for p in ordered))

    def compute() -> str:
        digest = hashlib.sha256(salt.encode("utf-8"))
        for path in ordered:
            size = path.stat().st_size
            digest.update(f"\0{path.relative_to(root).as_posix()}\0{size}\0".encode())
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
        return digest.hexdigest()

    return _remembered(key, compute)


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of ``path``'s bytes, read in chunks (remembered by stamp)."""

    def compute() -> str:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    return _remembered(("file", str(path), _stamp(path)), compute)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Temp file beside ``path``, fsync, ``os.replace``, fsync the folder."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)  # mkstemp's 0600 would hide a shared cache
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class OnnxCache:
    """``<folder>/<key>.onnx`` entries, each with its digest beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.onnx"

    def verified_path(self, key: str) -> Path | None:
        """The entry's file if present and matching its digest; None (and a warning) if not.

        The digest is computed in chunks and the caller loads the file by path: holding the
        model's bytes while onnxruntime builds its session from them cost ~150 MB of peak
        memory (and ~60 MB for good: a session made from bytes keeps its own copy)."""
        path = self.path(key)
        digest_path = path.with_name(path.name + ".sha256")
        try:
            expected = digest_path.read_text(encoding="ascii").strip()
            actual = file_sha256(path)
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("onnx cache: cannot read %s (%s): rebuilding it", path, exc)
            return None
        if actual != expected:
            log.warning("onnx cache: %s does not match its digest: rebuilding it", path)
            return None
        return path

    def write(self, key: str, data: bytes) -> None:
        """The model first, then its digest: a crash between leaves an entry that fails to
        verify (and is rebuilt), never a digest vouching for a half-written model."""
        path = self.path(key)
        write_atomically(path, data)
        digest = hashlib.sha256(data).hexdigest()
        write_atomically(path.with_name(path.name + ".sha256"), f"{digest}\n".encode("ascii"))

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> Path:
        """The verified entry's file, else ``build()``'s bytes stored (one builder at a time)."""
        path = self.verified_path(key)
        if path is not None:
            return path
        from filelock import FileLock

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.folder / f"{key}.lock"))
            lock.acquire()
        except OSError as exc:
            raise CacheDirError(f"cannot write the cache folder {self.folder}: {exc}") from exc
        try:
            path = self.verified_path(key)  # another process may have built it meanwhile
            if path is None:
                data = build()
                try:
                    self.write(key, data)
                except OSError as exc:
                    raise CacheDirError(f"cannot write {self.path(key)}: {exc}") from exc
                path = self.path(key)
            return path
        finally:
            lock.release()
