"""AgentStateStore on Redis: sessions shared by several service processes, expiring by Redis.

Keys (``MEMORY_REDIS__KEY_PREFIX``, default ``memory-service``; ids never hold ``:``)::

    <prefix>:state:<tenant>:<user>:<session>   {version, incarnation, updated_at, expires_at, state}
    <prefix>:sessions:<tenant>:<user>          the user's session ids (a set)
    <prefix>:users:<tenant>, <prefix>:tenants  who has sessions (the scheduler's sweep)
    <prefix>:erased:<tenant>:<user digest>     when the user was last erased (seconds); the
                                               id's digest, as a tombstone holds no user data

A save is one Lua script, so the compare-and-set is one round trip and atomic: it writes only
if the stored version (0 when none is live) is the one the state was loaded at and the
incarnation is the same, and refuses a save that began before the user's last erase (the
marker is set before an erase deletes anything), so no save in flight writes an erased user
back. The TTL is the store's clock (``expires_at`` in the record, refreshed by every save);
Redis's own expiry is set ``EXPIRY_GRACE`` later, so the sweep can still flush an expired
state's messages before it goes, and a state nobody sweeps still goes. A lost connection is a
503 (``BackendUnavailableError``), as PostgreSQL's is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ConflictError,
    UserErasedError,
)
from memory_service.domain.facts import utcnow
from memory_service.stores.shortterm.session_state import (
    Clock,
    KeepExpired,
    SessionInfo,
    conflict_message,
    is_expired,
    saved_record,
    session_of,
)
from memory_service.stores.tombstones import Tombstones, user_digest

log = logging.getLogger(__name__)

URL_SETTING = "MEMORY_REDIS__URL"
EXPIRY_GRACE = timedelta(days=1)  # Redis drops a state this long after its TTL
ERASE_MARK_TTL_S = 7 * 86_400  # longer than any save can be in flight

# KEYS: state, sessions, erased, tenants, users
# ARGV: expected version, incarnation, record, now, began, redis ttl ms (0: none), ids
_SAVE = """
local marker = redis.call('GET', KEYS[3])
if marker and tonumber(marker) >= tonumber(ARGV[5]) then return -2 end
local current = redis.call('GET', KEYS[1])
local stored = 0
if current then
  local record = cjson.decode(current)
  local live = record.expires_ts == nil or record.expires_ts > tonumber(ARGV[4])
  if live then
    stored = record.version
    if record.incarnation ~= ARGV[2] then return -1 end
  end
end
if stored ~= tonumber(ARGV[1]) then return -1 end
redis.call('SET', KEYS[1], ARGV[3])
if tonumber(ARGV[6]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
redis.call('SADD', KEYS[2], ARGV[7])
redis.call('SADD', KEYS[4], ARGV[8])
redis.call('SADD', KEYS[5], ARGV[9])
return 1
"""

# KEYS: state, sessions; ARGV: version (-1: any), session id. Returns the deleted record or nil.
_DELETE = """
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('SREM', KEYS[2], ARGV[2])
  return false
end
if tonumber(ARGV[1]) >= 0 and cjson.decode(current).version ~= tonumber(ARGV[1]) then
  return false
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return current
"""


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RedisAgentStateStore:
    """``AgentStateStore`` over one Redis database (``redis`` package, its connection pool)."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "memory-service",
        ttl: timedelta | None = None,
        clock: Clock = utcnow,
        tombstones: Tombstones | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        import redis

        self.ttl = ttl
        self.where = _redact(url)
        self._prefix = key_prefix
        self._clock = clock
        self._tombstones = tombstones  # None: no erase refuses a save (a store on its own)
        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
        )
        try:
            self._redis = redis.Redis.from_url(
                url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
            )
            self._redis.ping()
        except ValueError as exc:
            raise ConfigurationError(f"{URL_SETTING}: not a Redis URL ({exc})") from exc
        except self._errors as exc:
            raise ConfigurationError(
                f"{URL_SETTING}: Redis ({self.where}) cannot be reached: {type(exc).__name__}"
            ) from exc
        self._save = self._redis.register_script(_SAVE)
        self._delete = self._redis.register_script(_DELETE)

    # -- keys -----------------------------------------------------------------------------

    def _state_key(self, tenant: str, user: str, session: str) -> str:
        return f"{self._prefix}:state:{tenant}:{user}:{session}"

    def _sessions_key(self, tenant: str, user: str) -> str:
        return f"{self._prefix}:sessions:{tenant}:{user}"

    def _erased_key(self, ctx: RuntimeContext) -> str:
        return f"{self._prefix}:erased:{ctx.tenant_id}:{user_digest(ctx)}"

    @contextmanager
    def _unavailable(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:  # the caller hears the setting, the log where Redis is
            log.error("Redis (%s) is unavailable: %s", self.where, exc)
            raise BackendUnavailableError(
                f"Redis is unavailable (the server {URL_SETTING} names): {type(exc).__name__}"
            ) from exc

    def _record(self, raw: bytes | None) -> dict[str, Any] | None:
        if raw is None:
            return None
        record = json.loads(raw)
        expires = record.get("expires_at")
        record["expires_at"] = datetime.fromisoformat(expires) if expires else None
        record["updated_at"] = datetime.fromisoformat(record["updated_at"])
        return record

    @staticmethod
    def _state_of(record: dict[str, Any]) -> AgentState:
        state = AgentState.from_dict(record["state"])
        state.version = int(record["version"])
        return state

    # -- the contract ---------------------------------------------------------------------

    def load(self, ctx: RuntimeContext) -> AgentState:
        key = self._state_key(ctx.tenant_id, ctx.user_id, session_of(ctx))
        with self._unavailable():
            record = self._record(self._redis.get(key))
        if record is None or is_expired(record["expires_at"], self._clock()):
            return AgentState(session_id=ctx.session_id)
        return self._state_of(record)

    def save(self, state: AgentState, ctx: RuntimeContext) -> None:
        session = session_of(ctx)
        began = self._clock()
        if self._tombstones is not None:
            self._tombstones.check(ctx)
        now = self._clock()
        record = saved_record(state, ctx, now, self.ttl)
        new_version = record["version"]
        if self.ttl is not None:  # the Lua script compares numbers, not ISO text
            record["expires_ts"] = (now + self.ttl).timestamp()
        redis_ttl_ms = int((self.ttl + EXPIRY_GRACE).total_seconds() * 1000) if self.ttl else 0
        keys = [
            self._state_key(ctx.tenant_id, ctx.user_id, session),
            self._sessions_key(ctx.tenant_id, ctx.user_id),
            self._erased_key(ctx),
            f"{self._prefix}:tenants",
            f"{self._prefix}:users:{ctx.tenant_id}",
        ]
        args = [
            state.version,
            state.incarnation,
            json.dumps(record, ensure_ascii=False),
            now.timestamp(),
            began.timestamp(),
            redis_ttl_ms,
            session,
            ctx.tenant_id,
            ctx.user_id,
        ]
        with self._unavailable():
            outcome = int(self._save(keys=keys, args=args))
        if outcome == -2:
            raise UserErasedError(f"user {ctx.user_id!r} was erased while this save was made")
        if outcome != 1:
            raise ConflictError(conflict_message(ctx, state.version))
        state.version = new_version
        state.session_id = ctx.session_id

    def remove(self, ctx: RuntimeContext) -> bool:
        session = session_of(ctx)
        keys = [
            self._state_key(ctx.tenant_id, ctx.user_id, session),
            self._sessions_key(ctx.tenant_id, ctx.user_id),
        ]
        with self._unavailable():
            record = self._record(self._delete(keys=keys, args=[-1, session]) or None)
        return record is not None and not is_expired(record["expires_at"], self._clock())

    def _records(self, tenant: str, user: str) -> list[tuple[str, dict[str, Any]]]:
        """The user's stored sessions (expired ones too), forgetting ids Redis expired."""
        sessions_key = self._sessions_key(tenant, user)
        with self._unavailable():
            ids = sorted(s.decode() for s in self._redis.smembers(sessions_key))
            raws = self._redis.mget([self._state_key(tenant, user, s) for s in ids]) if ids else []
            gone = [s for s, raw in zip(ids, raws, strict=True) if raw is None]
            if gone:
                self._redis.srem(sessions_key, *gone)
        return [
            (s, record)
            for s, raw in zip(ids, raws, strict=True)
            if (record := self._record(raw)) is not None
        ]

    def list_sessions(self, ctx: RuntimeContext) -> list[SessionInfo]:
        now = self._clock()
        found = [
            SessionInfo(
                session_id=session,
                version=int(record["version"]),
                updated_at=record["updated_at"],
                expires_at=record["expires_at"],
                message_count=len(record["state"].get("messages") or ()),
            )
            for session, record in self._records(ctx.tenant_id, ctx.user_id)
            if not is_expired(record["expires_at"], now)
        ]
        found.sort(key=lambda info: (info.updated_at, info.session_id), reverse=True)
        return found

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many session states the user has stored, expired ones included."""
        return len(self._records(ctx.tenant_id, ctx.user_id))

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete every session state of the user; a save that began before this is refused
        (the marker is written first). How many states there were."""
        now = self._clock()
        with self._unavailable():
            self._redis.set(self._erased_key(ctx), now.timestamp(), ex=ERASE_MARK_TTL_S)
            records = self._records(ctx.tenant_id, ctx.user_id)
            keys = [self._state_key(ctx.tenant_id, ctx.user_id, s) for s, _ in records]
            if keys:
                self._redis.delete(*keys)
            self._redis.delete(self._sessions_key(ctx.tenant_id, ctx.user_id))
            self._redis.srem(f"{self._prefix}:users:{ctx.tenant_id}", ctx.user_id)
        return len(records)

    def tenants(self) -> list[str]:
        with self._unavailable():
            return sorted(t.decode() for t in self._redis.smembers(f"{self._prefix}:tenants"))

    def users(self, tenant_id: str) -> list[str]:
        with self._unavailable():
            members = self._redis.smembers(f"{self._prefix}:users:{tenant_id}")
        return sorted(u.decode() for u in members)

    def purge_expired(self, keep: KeepExpired | None = None) -> int:
        """Delete the states past the store's TTL (``keep`` may spare one; a state saved
        meanwhile stays); how many went."""
        if self.ttl is None:
            return 0
        removed = 0
        for tenant in self.tenants():
            for user in self.users(tenant):
                removed += self._purge_user(tenant, user, keep)
        return removed

    def _purge_user(self, tenant: str, user: str, keep: KeepExpired | None) -> int:
        removed = 0
        for session, record in self._records(tenant, user):
            if not is_expired(record["expires_at"], self._clock()):
                continue
            state = self._state_of(record)
            if keep is not None and keep(RuntimeContext(tenant, user, session), state):
                continue
            keys = [self._state_key(tenant, user, session), self._sessions_key(tenant, user)]
            with self._unavailable():
                if self._delete(keys=keys, args=[state.version, session]):
                    removed += 1
        return removed

    def close(self) -> None:
        self._redis.close()
