"""What a read may return (``ReadView``), written as SQL conditions on ``longterm_facts``.

``ReadView.admits`` is the rule; these are the same conditions over the row's columns and its
JSON, so a filter narrows each leg inside the database, before the cut to ``depth``: the
owner, open or valid at ``as_of``, not expired at ``now`` (the fact's own ``expires_at``, and
with the importance TTL the age its importance allows), the metadata filter, and
``needs_verification`` as ``ConfidenceDecay`` computes it. Every condition is a fragment with
its parameters; nothing of a caller's input is spliced into the text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ConfidenceDecay, ExpiryPolicy, FactFilter
from memory_service.longterm.store_values import ReadView

DAY_SECONDS = 86_400.0


@dataclass(slots=True)
class Where:
    """Conditions joined by AND, with their parameters in order."""

    parts: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, condition: str, *params: Any) -> Where:
        self.parts.append(condition)
        self.params.extend(params)
        return self

    @property
    def text(self) -> str:
        return " AND ".join(f"({p})" for p in self.parts) or "true"


def owner_where(ctx: RuntimeContext, alias: str = "f") -> Where:
    return Where().add(f"{alias}.tenant_id = %s AND {alias}.owner = %s", ctx.tenant_id, ctx.owner)


def live(where: Where, expiry: ExpiryPolicy, now: datetime, alias: str = "f") -> Where:
    """Not expired at ``now`` (``ExpiryPolicy.expired``, negated)."""
    if not expiry.by_importance:
        return where.add(f"{alias}.expires_at IS NULL OR {alias}.expires_at > %s", now)
    long_after = now - timedelta(days=expiry.long_days)
    short_after = now - timedelta(days=expiry.short_days)
    return where.add(
        f"CASE WHEN {alias}.expires_at IS NOT NULL THEN {alias}.expires_at > %s "
        f"WHEN {alias}.importance >= %s OR {alias}.created_at IS NULL THEN true "
        f"WHEN {alias}.importance >= %s THEN {alias}.created_at > %s "
        f"ELSE {alias}.created_at > %s END",
        now,
        expiry.never_at,
        expiry.long_at,
        long_after,
        short_after,
    )


def metadata(where: Where, wanted: FactFilter, alias: str = "f") -> Where:
    """``FactFilter.matches``: kinds, tags, importance, key, the creation range."""
    if wanted.kinds:
        where.add(f"{alias}.fact->>'kind' = ANY(%s)", list(wanted.kinds))
    if wanted.tags_any:
        where.add(f"{alias}.fact->'tags' ?| %s", list(wanted.tags_any))
    if wanted.tags_all:
        where.add(f"{alias}.fact->'tags' ?& %s", list(wanted.tags_all))
    if wanted.min_importance is not None:
        where.add(f"{alias}.importance >= %s", wanted.min_importance)
    if wanted.key is not None:
        where.add(f"{alias}.key = %s", wanted.key)
    if wanted.created_after is not None:
        where.add(f"{alias}.created_at >= %s", wanted.created_after)
    if wanted.created_before is not None:
        where.add(f"{alias}.created_at < %s", wanted.created_before)
    return where


def valid_at(where: Where, moment: datetime, alias: str = "f") -> Where:
    """``fact_filter.valid_at``: recorded by ``moment`` and not closed then (a fact marked
    superseded without ``valid_to`` is valid at no past moment)."""
    valid_to = f"({alias}.fact->>'valid_to')::timestamptz"
    return where.add(
        f"({alias}.created_at IS NULL OR {alias}.created_at <= %s) AND "
        f"CASE WHEN {alias}.fact->>'valid_to' IS NULL "
        f"THEN {alias}.fact->>'superseded_by' IS NULL ELSE {valid_to} > %s END",
        moment,
        moment,
    )


def decayed(decay: ConfidenceDecay, moment: datetime, alias: str = "f") -> tuple[str, list[Any]]:
    """``ConfidenceDecay.at`` as an SQL expression: the stored confidence, discounted by its
    kind's rate per day since it was last updated (or created)."""
    since = (
        f"COALESCE(({alias}.fact->>'updated_at')::timestamptz, "
        f"({alias}.fact->>'created_at')::timestamptz)"
    )
    rate = (
        f"CASE {alias}.fact->>'kind' WHEN 'event' THEN %s WHEN 'fact' THEN %s "
        f"WHEN 'procedure' THEN %s WHEN 'preference' THEN %s ELSE 0 END"
    )
    age = f"GREATEST(0, EXTRACT(EPOCH FROM (%s - {since})) / {DAY_SECONDS})"
    text = (
        f"CASE WHEN ({rate}) <= 0 OR {since} IS NULL "
        f"THEN ({alias}.fact->>'confidence')::float8 "
        f"ELSE ({alias}.fact->>'confidence')::float8 * exp(-({rate}) * {age}) END"
    )
    rates = [decay.event, decay.fact, decay.procedure, decay.preference]
    return text, [*rates, *rates, moment]


def view_where(ctx: RuntimeContext, view: ReadView, alias: str = "f") -> Where:
    """Every condition of ``view`` (``ReadView.admits``) on ``ctx``'s facts."""
    where = owner_where(ctx, alias)
    live(where, view.expiry, view.now, alias)
    metadata(where, view.filter, alias)
    if view.filter.as_of is not None:
        valid_at(where, view.filter.as_of, alias)
    else:
        where.add(f"{alias}.is_open")
    if view.filter.needs_verification is not None:
        expression, params = decayed(view.decay, view.moment, alias)
        sign = "<" if view.filter.needs_verification else ">="
        where.add(f"({expression}) {sign} %s", *params, view.decay.verify_below)
    return where
