"""API keys: each key belongs to one tenant and has a role (a personal key also one user). The
tenant, and a personal key's user, come only from here.

Keys are held as SHA-256 digests and compared in constant time. A ring read from a file
(``from_file``) follows it: at most once a second it looks at the file's inode, size and
mtime, and re-reads it when one changed, so ``memory-service keys add`` / ``revoke`` take
effect in a running ``serve`` without a restart; a key it does not know makes it look at once,
so a key just added works at its first request. An edit that cannot be read or parsed keeps
the previous keys (and is logged). The file's format and its changes: ``stores/api_keys``.

With replica state in PostgreSQL (``Settings.state_in_postgres``) the ring follows the
``api_keys`` table instead (``from_store``, ``PostgresKeyStore``): at most every
``MEMORY_STATE__KEYS_REFRESH_S`` seconds it asks the table's version and reloads when it
moved, so a key added or revoked by the CLI on any machine works, or stops working, on every
replica within that time. A check that cannot reach PostgreSQL fails the request with a 503
(``backend_unavailable``), not a 401 and not the old keys: a revocation is never missed for
longer than the refresh. For the refresh after a failure the same 503 comes without asking
again, so an outage does not queue every request behind a connection timeout.
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
from typing import TYPE_CHECKING, Protocol

from memory_service.config.settings import Settings
from memory_service.domain.errors import BackendUnavailableError, ConfigurationError, ForbiddenError
from memory_service.stores.api_keys import (
    RIGHTS,
    ROLE_ALIASES,
    KeyEntry,
    Right,
    Role,
    Stamp,
    digest_of,
    parse_entries,
)
from memory_service.stores.api_keys.files import read_entries, stamp_of
from memory_service.stores.api_keys.postgres import PostgresKeyStore
from memory_service.stores.build import api_keys, keys_file

if TYPE_CHECKING:
    from memory_service.stores.database import Database

__all__ = [
    "ApiKeyRing",
    "KeySource",
    "Principal",
    "VersionedKeys",
    "load_key_ring",
]

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Principal:
    """Who called: the tenant their key belongs to, its role, and a personal key's user."""

    tenant_id: str
    role: Role
    key_id: str  # the key's fingerprint (first hex digits of its digest): safe to log
    user_id: str | None = None  # a personal key's one user; None: the role's reach

    def may(self, right: Right) -> bool:
        """Whether the key's role (or the role its alias names) has ``right``
        (``stores.api_keys.RIGHTS``); an unknown role has none."""
        return right in RIGHTS.get(ROLE_ALIASES.get(self.role, self.role), frozenset())

    def user_for(self, user_id: str | None) -> str | None:
        """The user a call with ``user_id`` acts for: a personal key's own whatever is named,
        and anything but its own user named is a ``ForbiddenError`` (``forbidden_user``);
        other keys act for the user named. Every context of a request is made through here."""
        if self.user_id is None:
            return user_id
        if user_id is not None and user_id != self.user_id:
            raise ForbiddenError(
                f"this key is bound to user {self.user_id!r}: it cannot act for {user_id!r}",
                code="forbidden_user",
            )
        return self.user_id

    def check_every_user(self, what: str) -> None:
        """``forbidden_user`` for a personal key: ``what`` reaches every user of the tenant."""
        if not self.may("every_user"):
            raise ForbiddenError(
                f"this key is bound to user {self.user_id!r}: {what} reaches every user of "
                "the tenant (use an application or admin key)",
                code="forbidden_user",
            )


class VersionedKeys(Protocol):
    """Keys a ring follows by a version number (``PostgresKeyStore``)."""

    @property
    def where(self) -> str: ...

    def version(self) -> int: ...

    def load(self) -> tuple[int, list[KeyEntry]]: ...


def _index(entries: Iterable[KeyEntry]) -> dict[bytes, Principal]:
    return {e.digest: Principal(e.tenant, e.role, e.fingerprint, e.user) for e in entries}


class ApiKeyRing:
    """The known keys: ``ApiKeyRing({"<key>": {"tenant", "role"}})``, or ``from_file``."""

    def __init__(self, entries: Mapping[str, Mapping] | Iterable[KeyEntry]) -> None:
        if isinstance(entries, Mapping):
            entries = parse_entries(entries)
        self._by_digest = _index(entries)
        self._path: Path | None = None
        self._stamp: Stamp | None = None
        self._store: VersionedKeys | None = None
        self._version = 0
        self._failure: tuple[float, str] | None = None  # when the store last failed, and why
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

    @classmethod
    def from_store(
        cls,
        store: VersionedKeys,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = RELOAD_INTERVAL_S,
    ) -> ApiKeyRing:
        """The keys of ``store`` now, then reloaded whenever its version moves, looked at no
        more than once per ``interval_s``."""
        version, entries = store.load()
        ring = cls(entries)
        ring._store, ring._version, ring._clock = store, version, clock
        ring._interval_s = interval_s
        ring._checked_at = clock()
        return ring

    def __len__(self) -> int:
        self._refresh()
        return len(self._by_digest)

    def tenants(self) -> set[str]:
        self._refresh()
        return {p.tenant_id for p in self._by_digest.values()}

    def known(self, key: str | None) -> Principal | None:
        """The key's principal when the ring need not look at its file or store first (a
        digest and a comparison per key: cheap enough for the event loop); None when it is
        unknown or a look is due, and ``lookup``, which may stat the file or ask the store,
        must answer."""
        if not key or self._failure is not None:
            return None
        watched = self._path is not None or self._store is not None
        if watched and self._clock() - self._checked_at >= self._interval_s:
            return None
        return self._find(digest_of(key))

    def lookup(self, key: str | None) -> Principal | None:
        """The key's principal, or None. A key the file does not know yet makes the ring look
        at the file at once (a stat; re-read only when it changed), so a key just added with
        ``memory-service keys add`` works at its first request. A revoked key still works
        until the next look, at most an interval later. A store (PostgreSQL) is asked no
        more than once per interval whatever keys arrive."""
        if not key:
            return None
        self._refresh()
        digest = digest_of(key)
        found = self._find(digest)
        if found is None and self._path is not None:
            self._refresh(at_once=True)
            found = self._find(digest)
        return found

    def _find(self, digest: bytes) -> Principal | None:
        found = None
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    def _refresh(self, *, at_once: bool = False) -> None:
        """Re-read the file or the store if it changed; looked at no more than once per
        interval (``at_once``: the file now, whenever it was last looked at)."""
        if not at_once and self._clock() - self._checked_at < self._interval_s:
            return
        if self._store is not None:
            self._refresh_store(self._store)
            return
        path = self._path
        if path is None:
            return
        with self._reload_lock:
            now = self._clock()
            if not at_once and now - self._checked_at < self._interval_s:
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

    def _refresh_store(self, store: VersionedKeys) -> None:
        """Reload when the version moved; unreachable: a ``BackendUnavailableError`` now and,
        without asking again, for the interval after (see the module docstring)."""
        with self._reload_lock:
            now = self._clock()
            if self._failure is not None and now - self._failure[0] < self._interval_s:
                raise BackendUnavailableError(self._failure[1])
            if now - self._checked_at < self._interval_s:
                return
            try:
                if store.version() != self._version:
                    self._version, entries = store.load()
                    self._by_digest = _index(entries)
                    log.info("API keys reloaded from %s: %d keys", store.where, len(entries))
            except BackendUnavailableError as exc:
                message = f"API keys cannot be checked: {exc.message}"
                # the interval runs from when the failure is known: finding it may have
                # waited out the pool's connect timeout
                self._failure = (self._clock(), message)
                raise BackendUnavailableError(message) from exc
            self._checked_at, self._failure = now, None


@dataclass(frozen=True, slots=True)
class KeySource:
    """The ring ``serve`` authenticates with, where its keys live, and a development key
    minted by this start (shown once)."""

    ring: ApiKeyRing
    path: Path | None  # the keys file (absolute); None: the keys are in PostgreSQL
    created_dev_key: str | None = None
    store: str | None = None  # where the keys are when not in a file

    @property
    def where(self) -> str:
        return self.store or str(self.path)


def load_key_ring(settings: Settings, database: Database | None = None) -> KeySource:
    """The configured keys file; else ``<workspace>/api-keys.json``, created with a development
    key for tenant ``default`` (role admin) when it does not exist yet. The key is returned
    to be shown once; the file keeps only its digest.

    With replica state in PostgreSQL the keys of ``database`` instead (``_postgres_keys``)."""
    if settings.state_in_postgres and database is None:
        raise ConfigurationError("API keys in PostgreSQL need the state database")
    store = api_keys(settings, database)
    if isinstance(store, PostgresKeyStore):
        return _postgres_keys(settings, store)
    path = keys_file(settings)
    if settings.api_keys_file is not None or path.exists():
        return KeySource(ApiKeyRing.from_file(path), path)
    key = store.add("default", "admin", prefix="msk_dev_")
    return KeySource(ApiKeyRing.from_file(path), path, created_dev_key=key)


def postgres_key_ring(settings: Settings, database: Database) -> ApiKeyRing:
    """The ring over the keys in PostgreSQL, refreshed every ``keys_refresh_s``; mints
    nothing (``memory-service mcp`` authenticates one caller with it)."""
    store = PostgresKeyStore(database)
    return ApiKeyRing.from_store(store, interval_s=settings.state.keys_refresh_s)


def _postgres_keys(settings: Settings, store: PostgresKeyStore) -> KeySource:
    """The keys in PostgreSQL; nothing is read from or written to the workspace.

    The development key: minted (tenant ``default``, role admin, shown once in the banner)
    only when the table has never held a key, checked and written in one locked transaction
    so replicas starting together mint one between them; a table whose keys were all revoked
    gets none. A keys file beside an empty table (``MEMORY_API_KEYS_FILE``, or one in the
    workspace) is refused rather than replaced by a development key: its callers would
    all get 401s. ``memory-service keys migrate`` imports it; after that it is not read."""
    legacy = keys_file(settings)
    if store.is_empty() and (settings.api_keys_file is not None or legacy.exists()):
        raise ConfigurationError(
            f"API keys: {store.where} holds none, but there is a keys file ({legacy}): "
            "import it with `memory-service keys migrate` (with MEMORY_STATE__BACKEND=postgres "
            "the keys are read from PostgreSQL only)"
        )
    created = store.add_if_empty("default", "admin", prefix="msk_dev_")
    if created is None and legacy.exists():
        log.warning("API keys come from %s: the keys file %s is not read", store.where, legacy)
    ring = ApiKeyRing.from_store(store, interval_s=settings.state.keys_refresh_s)
    return KeySource(ring, None, created_dev_key=created, store=store.where)
