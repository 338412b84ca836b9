"""Which points a read, query or delete of an engine touches: an ``OwnerFilter`` always names a
tenant and one owner (a user, an agent's or the tenant's shared memory), so an engine has no
unscoped call. The owner's conditions are written once (``OwnerFilter.owner_conditions``) and
translated by one function per engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memory_service.domain.context import RuntimeContext, validate_id
from memory_service.domain.fact_filter import ExpiryPolicy, FactFilter
from memory_service.longterm.qdrant.layout import AGENT_FIELD, SCOPE_FIELD, TENANT_FIELD, USER_FIELD


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


@dataclass(frozen=True, slots=True)
class ImportanceTtl:
    """``ExpiryPolicy``'s rule for points without ``expires_at``, at one moment: importance
    at least ``never_at`` never expires; at least ``long_at`` must be created after
    ``long_after``; lower, after ``short_after`` (ISO-8601)."""

    never_at: int
    long_at: int
    long_after: str
    short_after: str

    @classmethod
    def of(cls, policy: ExpiryPolicy, now: datetime) -> ImportanceTtl | None:
        if not policy.by_importance:
            return None
        return cls(
            policy.never_at,
            policy.long_at,
            _iso(now - timedelta(days=policy.long_days)) or "",
            _iso(now - timedelta(days=policy.short_days)) or "",
        )


@dataclass(frozen=True, slots=True)
class OwnerFilter:
    """The points of one owner of one tenant (a user; or, when ``scope`` is ``agent`` or
    ``tenant``, that agent's or the tenant's shared facts, which carry no user id), optionally
    narrowed.

    - ``ids``: only these point ids;
    - ``keys``: only facts with one of these subject keys;
    - ``open_only``: not superseded and not closed (``superseded_by`` and ``valid_to`` empty);
    - ``live_at``: not expired at this ISO-8601 time (``expires_at`` later, or empty and,
      with ``ttl``, young enough for its importance);
    - ``valid_at``: valid at this ISO-8601 time (created by then; open, or closed later);
    - ``facts``: the caller's metadata filter (kind, tags, importance, key, created range);
    - ``exclude_ids``: not these point ids (facts a read resolved away: a lost key race).
    """

    tenant_id: str
    user_id: str
    ids: tuple[str, ...] | None = None
    keys: tuple[str, ...] | None = None
    open_only: bool = False
    live_at: str | None = None
    scope: str = "user"
    agent_id: str | None = None
    ttl: ImportanceTtl | None = None
    valid_at: str | None = None
    facts: FactFilter | None = None
    exclude_ids: tuple[str, ...] | None = None

    @classmethod
    def of(
        cls,
        ctx: RuntimeContext,
        *,
        ids: Sequence[str] | None = None,
        keys: Sequence[str] | None = None,
        open_only: bool = False,
        live_at: datetime | None = None,
        expiry: ExpiryPolicy | None = None,
        valid_at: datetime | None = None,
        facts: FactFilter | None = None,
        exclude_ids: Sequence[str] | None = None,
    ) -> OwnerFilter:
        """The one place a tenant/user scope is built (from an already validated context).
        ``expiry`` (with ``live_at``): also hide points past their importance TTL."""
        ttl = ImportanceTtl.of(expiry, live_at) if expiry and live_at else None
        return cls(
            validate_id(ctx.tenant_id, "tenant_id"),
            validate_id(ctx.user_id, "user_id"),
            tuple(ids) if ids is not None else None,
            tuple(keys) if keys is not None else None,
            open_only,
            _iso(live_at),
            ctx.scope,
            validate_id(ctx.agent_id, "agent_id") if ctx.scope == "agent" else None,
            ttl,
            _iso(valid_at),
            facts if facts is not None and not facts.is_empty else None,
            tuple(exclude_ids) if exclude_ids else None,
        )

    def owner_conditions(self) -> list[tuple[str, str]]:
        """(field, value) pairs every point of the owner matches, tenant first: a user's
        facts by ``user_id`` (shared facts have none), shared ones by scope (and agent)."""
        if self.scope == "agent":
            return [
                (TENANT_FIELD, self.tenant_id),
                (SCOPE_FIELD, "agent"),
                (AGENT_FIELD, str(self.agent_id)),
            ]
        if self.scope == "tenant":
            return [(TENANT_FIELD, self.tenant_id), (SCOPE_FIELD, "tenant")]
        return [(TENANT_FIELD, self.tenant_id), (USER_FIELD, self.user_id)]

    def owner_key(self) -> OwnerKey:
        """The owner as a hashable value: equal to ``owner_key_of`` each of its payloads."""
        return tuple(self.owner_conditions())


OwnerKey = tuple[tuple[str, str], ...]


def owner_key_of(payload: Mapping[str, Any]) -> OwnerKey:
    """The owner of a stored point, from its payload: the ``owner_key`` of its owner's filter
    (``owner_conditions`` is the one mapping of an owner to fields)."""
    owner = OwnerFilter(
        str(payload.get(TENANT_FIELD)),
        str(payload.get(USER_FIELD)),
        scope=payload.get(SCOPE_FIELD) or "user",
        agent_id=payload.get(AGENT_FIELD),
    )
    return owner.owner_key()
