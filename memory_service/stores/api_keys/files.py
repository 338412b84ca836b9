"""API keys in the keys file (``MEMORY_API_KEYS_FILE``, else ``<workspace>/api-keys.json``):
read it, and change it atomically under a lock beside it, readable by its owner only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock

from memory_service.domain.errors import ConfigurationError
from memory_service.domain.paths import lock_for
from memory_service.stores.api_keys import (
    KEY_PREFIX,
    SETTING,
    KeyEntry,
    Stamp,
    find_entry,
    mint,
    parse_entries,
)
from memory_service.stores.fsutil import ensure_dir, file_lock, write_atomically


def read_entries(path: Path) -> tuple[list[KeyEntry], Stamp]:
    """The file's keys and the stamp of the very file they were read from."""
    try:
        with open(path, encoding="utf-8") as handle:
            info = os.fstat(handle.fileno())
            text = handle.read()
    except FileNotFoundError:
        raise ConfigurationError(f"{SETTING}: no such file {str(path)!r}") from None
    except OSError as exc:
        raise ConfigurationError(f"{SETTING}: cannot read {path}: {exc.strerror}") from exc
    try:
        decoded = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{SETTING}: {path} is not JSON: {exc}") from exc
    return parse_entries(decoded), stamp_of(info)


def stamp_of(info: os.stat_result) -> Stamp:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def write_entries(path: Path, entries: Iterable[KeyEntry]) -> None:
    """Replace the file with ``entries``, every key as its digest, readable by its owner only."""
    body = dict(entry.to_json() for entry in entries)
    write_atomically(path, json.dumps(body, indent=2) + "\n")
    os.chmod(path, 0o600)


class FilesKeyStore:
    """``KeyStore`` over one keys file (the changes ``memory-service keys`` makes to it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def where(self) -> str:
        """Where the keys live, for messages."""
        return str(self.path)

    def entries(self) -> list[KeyEntry]:
        if not self.path.exists():
            return []
        return read_entries(self.path)[0]

    def add(
        self,
        tenant: str,
        role: str = "application",
        *,
        prefix: str = KEY_PREFIX,
        user: str | None = None,
    ) -> str:
        key, entry = mint(tenant, role, prefix, user=user)
        with self._lock():
            write_entries(self.path, [*self.entries(), entry])
        return key

    def revoke(self, key_or_fingerprint: str) -> KeyEntry:
        """Remove the key given itself, or by a prefix of its fingerprint (unique)."""
        with self._lock():
            entries = self.entries()
            match = find_entry(entries, key_or_fingerprint, self.where)
            write_entries(self.path, [e for e in entries if e.digest != match.digest])
        return match

    def migrate(self) -> int:
        """Store every plaintext key as its digest; returns how many were converted."""
        with self._lock():
            entries = self.entries()
            converted = sum(e.plaintext for e in entries)
            if converted:
                write_entries(self.path, entries)
        return converted

    def _lock(self) -> FileLock:
        ensure_dir(self.path.parent)
        return file_lock(lock_for(self.path), timeout=30)
