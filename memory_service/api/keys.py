"""API keys: each key belongs to one tenant and has a role. The tenant comes only from here.

The keys file is JSON: ``{"<key>": {"tenant": "acme", "role": "user" | "admin"}}``. Keys are
kept in memory as SHA-256 digests and compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from memory_service.config import Settings
from memory_service.context import validate_id
from memory_service.errors import ConfigurationError, InvalidIdError
from memory_service.fsutil import write_atomically
from memory_service.limits import MIN_API_KEY_CHARS
from memory_service.paths import WorkspacePaths

Role = Literal["user", "admin"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who called: the tenant their key belongs to, and its role."""

    tenant_id: str
    role: Role
    key_id: str  # first hex digits of the key's digest: safe to log


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class ApiKeyRing:
    def __init__(self, entries: dict[str, dict]) -> None:
        self._by_digest: dict[bytes, Principal] = {}
        for key, spec in entries.items():
            if not isinstance(key, str) or len(key) < MIN_API_KEY_CHARS:
                raise ConfigurationError(
                    f"MEMORY_API_KEYS_FILE: every key needs >= {MIN_API_KEY_CHARS} characters"
                )
            if not isinstance(spec, dict):
                raise ConfigurationError("MEMORY_API_KEYS_FILE: each key maps to {tenant, role}")
            try:
                tenant = validate_id(spec.get("tenant"), "tenant")
            except InvalidIdError as exc:
                raise ConfigurationError(f"MEMORY_API_KEYS_FILE: {exc.message}") from exc
            role = spec.get("role", "user")
            if role not in ("user", "admin"):
                raise ConfigurationError(f"MEMORY_API_KEYS_FILE: role {role!r} is not user|admin")
            digest = _digest(key)
            self._by_digest[digest] = Principal(tenant, role, digest.hex()[:8])

    @classmethod
    def from_file(cls, path: Path) -> ApiKeyRing:
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigurationError(f"MEMORY_API_KEYS_FILE: no such file {str(path)!r}") from None
        except ValueError as exc:
            raise ConfigurationError(f"MEMORY_API_KEYS_FILE: {path} is not JSON: {exc}") from exc
        if not isinstance(entries, dict):
            raise ConfigurationError("MEMORY_API_KEYS_FILE: expected a JSON object of keys")
        return cls(entries)

    def __len__(self) -> int:
        return len(self._by_digest)

    def tenants(self) -> set[str]:
        return {p.tenant_id for p in self._by_digest.values()}

    def lookup(self, key: str | None) -> Principal | None:
        if not key:
            return None
        digest = _digest(key)
        found = None
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                found = principal
        return found


@dataclass(frozen=True, slots=True)
class KeySource:
    ring: ApiKeyRing
    path: Path
    created_dev_key: str | None = None


def load_key_ring(settings: Settings) -> KeySource:
    """The configured keys file; else ``<workspace>/api-keys.json``, created with a development
    key for tenant ``default`` (role admin) when it does not exist yet."""
    if settings.api_keys_file is not None:
        return KeySource(ApiKeyRing.from_file(settings.api_keys_file), settings.api_keys_file)
    path = WorkspacePaths(settings.workspace).api_keys_file
    if path.exists():
        return KeySource(ApiKeyRing.from_file(path), path)
    key = "msk_dev_" + secrets.token_urlsafe(24)
    write_atomically(path, json.dumps({key: {"tenant": "default", "role": "admin"}}, indent=2))
    os.chmod(path, 0o600)
    return KeySource(ApiKeyRing.from_file(path), path, created_dev_key=key)
