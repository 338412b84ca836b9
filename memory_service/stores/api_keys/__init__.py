"""API keys: what a key is (a digest, a tenant, a role), minting one, and where keys are kept
(``KeyStore``: a keys file, ``files.py``, or a PostgreSQL table, ``postgres.py``), changed by
``memory-service keys`` (add, revoke, migrate) without hand-editing JSON.

The keys file is a JSON object from a key to its owner::

    {"sha256:<64 hex digits>": {"tenant": "acme", "role": "application", "created_at": "..."}}
    {"sha256:<64 hex digits>": {"tenant": "acme", "role": "personal", "user": "alice"}}

Only SHA-256 digests of the keys are written: a key is shown once, when it is added, and
cannot be read back. A file written by hand (or by an older version) may still name keys in
plaintext (``{"<key>": {"tenant": ..., "role": ...}}``); it is still read, and every
change written through here stores those keys as digests too (``keys migrate`` does only that).
Changes are atomic (readers see the old or the new file) and serialised by a lock beside it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from memory_service.domain.context import validate_id
from memory_service.domain.errors import ConfigurationError, InvalidIdError, InvalidInputError
from memory_service.domain.facts import utcnow
from memory_service.domain.limits import MIN_API_KEY_CHARS

# personal: one user's key (``user`` names them): that user's memory and sessions, the shared
# scopes they read, their own export and import, nothing of another user; application: the
# platform's key, addressing every user of its tenant; curator: also writes the shared agent
# and tenant memory; admin: everything, the admin-only routes (import, erase, maintenance)
# included. What each may do is ``RIGHTS``: the API checks a right, never a role's name.
Role = Literal["personal", "application", "curator", "admin"]


ROLES: tuple[str, ...] = ("personal", "application", "curator", "admin")


# the name an older version gave the application role: read from files, the CLI and table rows
ROLE_ALIASES: Mapping[str, str] = {"user": "application"}


Right = Literal["every_user", "shared_write", "admin"]


RIGHTS: Mapping[str, frozenset[str]] = {
    "personal": frozenset(),
    "application": frozenset({"every_user"}),
    "curator": frozenset({"every_user", "shared_write"}),
    "admin": frozenset({"every_user", "shared_write", "admin"}),
}


SHARED_MEMORY_ROLES: tuple[str, ...] = tuple(r for r in ROLES if "shared_write" in RIGHTS[r])


def role_of(name: object) -> Role:
    """The role ``name`` names (an alias read as its role); ``InvalidInputError`` otherwise."""
    role = ROLE_ALIASES.get(name, name) if isinstance(name, str) else name
    if role not in ROLES:
        raise InvalidInputError(f"role {name!r} is not {'|'.join(ROLES)}")
    return role  # type: ignore[return-value]


def check_binding(role: Role, user: str | None) -> str | None:
    """The validated user of a key: a personal key names one, no other role does."""
    if role == "personal":
        if user is None:
            raise InvalidInputError("a personal key is bound to one user: name it (--user)")
        return validate_id(user, "user")
    if user is not None:
        raise InvalidInputError(
            f"a key bound to a user is a personal key, not {role} (leave --role out)"
        )
    return None


SETTING = "MEMORY_API_KEYS_FILE"


DIGEST_PREFIX = "sha256:"


FINGERPRINT_CHARS = 12  # shown by `keys list`; the prefix of the key's SHA-256, in hex


MIN_FINGERPRINT_CHARS = 6  # `keys revoke` takes a fingerprint prefix at least this long


KEY_PREFIX = "msk_"


_DIGEST_ENTRY = re.compile(r"sha256:[0-9a-f]{64}")


Stamp = tuple[int, int, int]  # inode, size, mtime (ns): what says the file has changed


def digest_of(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def new_key(prefix: str = KEY_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(24)


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One key of the file, by its digest; ``plaintext``: the file names the key itself."""

    digest: bytes
    tenant: str
    role: Role
    created_at: str | None = None
    plaintext: bool = False
    user: str | None = None  # a personal key's one user

    @property
    def fingerprint(self) -> str:
        return self.digest.hex()[:FINGERPRINT_CHARS]

    def to_json(self) -> tuple[str, dict[str, str]]:
        spec = {"tenant": self.tenant, "role": self.role}
        if self.user is not None:
            spec["user"] = self.user
        if self.created_at:
            spec["created_at"] = self.created_at
        return DIGEST_PREFIX + self.digest.hex(), spec


def parse_entries(entries: object) -> list[KeyEntry]:
    """The keys of a decoded file; anything malformed is a ``ConfigurationError``."""
    if not isinstance(entries, Mapping):
        raise ConfigurationError(f"{SETTING}: expected a JSON object of keys")
    return [_entry(name, spec) for name, spec in entries.items()]


def _entry(name: object, spec: object) -> KeyEntry:
    if not isinstance(name, str):
        raise ConfigurationError(f"{SETTING}: every key must be a string")
    if name.startswith(DIGEST_PREFIX):
        if not _DIGEST_ENTRY.fullmatch(name):
            raise ConfigurationError(
                f"{SETTING}: a hashed key is 'sha256:' and 64 lowercase hex digits"
            )
        digest, plaintext = bytes.fromhex(name[len(DIGEST_PREFIX) :]), False
    elif len(name) < MIN_API_KEY_CHARS:
        raise ConfigurationError(f"{SETTING}: every key needs >= {MIN_API_KEY_CHARS} characters")
    else:
        digest, plaintext = digest_of(name), True
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"{SETTING}: each key maps to {{tenant, role}}")
    try:
        tenant = validate_id(spec.get("tenant"), "tenant")
    except InvalidIdError as exc:
        raise ConfigurationError(f"{SETTING}: {exc.message}") from exc
    user = spec.get("user")
    try:
        role = role_of(spec.get("role", "personal" if user is not None else "application"))
        user = check_binding(role, user)
    except InvalidInputError as exc:
        raise ConfigurationError(f"{SETTING}: {exc.message}") from exc
    created = spec.get("created_at")
    return KeyEntry(digest, tenant, role, str(created) if created else None, plaintext, user)


def mint(
    tenant: str, role: str, prefix: str = KEY_PREFIX, *, user: str | None = None
) -> tuple[str, KeyEntry]:
    """A new key for ``tenant`` (bound to ``user`` for a personal key) and the entry that
    stores its digest; a bad tenant, role or user is an ``InvalidInputError`` before anything
    is written."""
    tenant = validate_id(tenant, "tenant")
    checked = role_of(role)
    user = check_binding(checked, user)
    key = new_key(prefix)
    return key, KeyEntry(digest_of(key), tenant, checked, utcnow().isoformat(), user=user)


def find_entry(entries: Iterable[KeyEntry], given: str, where: str) -> KeyEntry:
    """The entry of ``given``: the key itself, or a unique prefix of its fingerprint
    (``keys revoke``); ``where`` names the store in the error."""
    entries = list(entries)
    given = given.strip()
    by_key = [e for e in entries if e.digest == digest_of(given)]
    if by_key:
        return by_key[0]
    prefix = given.lower()
    if len(prefix) < MIN_FINGERPRINT_CHARS or not re.fullmatch(r"[0-9a-f]+", prefix):
        raise InvalidInputError(
            "give the key itself or its fingerprint (at least "
            f"{MIN_FINGERPRINT_CHARS} hex digits, as `memory-service keys list` shows it)"
        )
    found = {e.digest: e for e in entries if e.digest.hex().startswith(prefix)}
    if not found:
        raise InvalidInputError(f"no key with fingerprint {prefix} in {where}")
    if len(found) > 1:
        raise InvalidInputError(f"{len(found)} keys start with {prefix}: give more digits")
    return next(iter(found.values()))


class KeyStore(Protocol):
    """Where the API keys live: the keys file (``FilesKeyStore``) or the keys table
    (``PostgresKeyStore``, shared by every replica)."""

    @property
    def where(self) -> str:
        """Where the keys live, for messages."""
        ...

    def entries(self) -> list[KeyEntry]: ...

    def add(
        self,
        tenant: str,
        role: str = "application",
        *,
        prefix: str = KEY_PREFIX,
        user: str | None = None,
    ) -> str:
        """Mint a key for ``tenant`` (a personal key: for its ``user`` alone), store its
        digest, return the key (shown only now)."""
        ...

    def revoke(self, key_or_fingerprint: str) -> KeyEntry:
        """Remove the key given itself, or by a prefix of its fingerprint (unique)."""
        ...

    def migrate(self) -> int:
        """Bring keys kept the old way into this store (plaintext keys of the file as
        digests; the keys file into the table); returns how many."""
        ...
