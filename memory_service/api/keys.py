"""API keys: each key belongs to one tenant and has a role. The tenant comes only from here.

Keys are held as SHA-256 digests and compared in constant time. A ring read from a file
(``from_file``) follows it: at most once a second it looks at the file's inode, size and
mtime, and re-reads it when one changed, so ``memory-service keys add`` / ``revoke`` take
effect in a running ``serve`` without a restart. An edit that cannot be read or parsed keeps
the previous keys (and is logged). The file's format and its changes: ``key_store``.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memory_service.api.key_store import (
    KeyEntry,
    KeyStore,
    Role,
    Stamp,
    digest_of,
    parse_entries,
    read_entries,
    stamp_of,
)
from memory_service.config import Settings
from memory_service.errors import ConfigurationError
from memory_service.paths import WorkspacePaths

__all__ = ["ApiKeyRing", "KeySource", "Principal", "Role", "keys_file", "load_key_ring"]

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Principal:
    """Who called: the tenant their key belongs to, and its role."""

    tenant_id: str
    role: Role
    key_id: str  # the key's fingerprint (first hex digits of its digest): safe to log


def _index(entries: Iterable[KeyEntry]) -> dict[bytes, Principal]:
    return {e.digest: Principal(e.tenant, e.role, e.fingerprint) for e in entries}


class ApiKeyRing:
    """The known keys: ``ApiKeyRing({"<key>": {"tenant", "role"}})``, or ``from_file``."""

    def __init__(self, entries: Mapping[str, Mapping] | Iterable[KeyEntry]) -> None:
        if isinstance(entries, Mapping):
            entries = parse_entries(entries)
        self._by_digest = _index(entries)
        self._path: Path | None = None
        self._stamp: Stamp | None = None
        self._clock: Callable[[], float] = time.monotonic
        self._checked_at = 0.0
        self._interval_s = RELOAD_INTERVAL_S
        self._reload_lock = threading.Lock()

    @classmethod
    def from_file(
        cls,
        path: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = RELOAD_INTERVAL_S,
    ) -> ApiKeyRing:
        """The keys of ``path`` (a ``ConfigurationError`` if it is bad now), kept current."""
        entries, stamp = read_entries(path)
        ring = cls(entries)
        ring._path, ring._stamp, ring._clock = path, stamp, clock
        ring._interval_s = interval_s
        ring._checked_at = clock()
        return ring

    def __len__(self) -> int:
        self._refresh()
        return len(self._by_digest)

    def tenants(self) -> set[str]:
        self._refresh()
        return {p.tenant_id for p in self._by_digest.values()}

    def lookup(self, key: str | None) -> Principal | None:
        if not key:
            return None
        self._refresh()
        digest = digest_of(key)
        found = None
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    def _refresh(self) -> None:
        """Re-read the file if it changed; looked at no more than once per interval."""
        path = self._path
        if path is None or self._clock() - self._checked_at < self._interval_s:
            return
        with self._reload_lock:
            now = self._clock()
            if now - self._checked_at < self._interval_s:
                return
            self._checked_at = now
            try:
                if stamp_of(os.stat(path)) == self._stamp:
                    return
                entries, stamp = read_entries(path)
            except (OSError, ConfigurationError) as exc:
                log.warning("API keys file %s unreadable, keeping the previous keys: %s", path, exc)
                return
            self._by_digest, self._stamp = _index(entries), stamp
            log.info("API keys reloaded from %s: %d keys", path, len(self._by_digest))


@dataclass(frozen=True, slots=True)
class KeySource:
    ring: ApiKeyRing
    path: Path  # absolute
    created_dev_key: str | None = None


def keys_file(settings: Settings) -> Path:
    """``MEMORY_API_KEYS_FILE``, else ``<workspace>/api-keys.json``; absolute."""
    path = settings.api_keys_file or WorkspacePaths(settings.workspace).api_keys_file
    return path.resolve()


def load_key_ring(settings: Settings) -> KeySource:
    """The configured keys file; else ``<workspace>/api-keys.json``, created with a development
    key for tenant ``default`` (role admin) when it does not exist yet. The key is returned
    to be shown once; the file keeps only its digest."""
    path = keys_file(settings)
    if settings.api_keys_file is not None or path.exists():
        return KeySource(ApiKeyRing.from_file(path), path)
    key = KeyStore(path).add("default", "admin", prefix="msk_dev_")
    return KeySource(ApiKeyRing.from_file(path), path, created_dev_key=key)
