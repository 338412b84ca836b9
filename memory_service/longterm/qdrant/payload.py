"""A fact as a point's payload and back: its fields (times in UTC ISO-8601) plus the tenant and
owner fields of the collection layout (``layout``)."""

from __future__ import annotations

from typing import Any

from indexing.tokenize import TOKENIZER_VERSION
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.qdrant.layout import (
    AGENT_FIELD,
    EMBEDDER_FIELD,
    SCOPE_FIELD,
    TENANT_FIELD,
    TERMS_FIELD,
    USER_FIELD,
)

_TIME_FIELDS = ("created_at", "updated_at", "expires_at", "valid_to")


def payload_of(ctx: RuntimeContext, fact: Fact, *, embedder: str | None) -> dict[str, Any]:
    """Payload of a stamped fact: its fields (times in UTC ISO-8601) plus tenant and owner
    (``user_id`` for a user's fact; ``scope``/``agent_id`` and no user for a shared one),
    ``terms_version``: the point written with it carries a sparse vector made now, and
    ``embedder``: the model of the dense vector written with it (a fresh vector: the
    embedder's name; a stored one: the name stored with it; None: no name)."""
    data = fact.to_dict()
    data.pop("id")
    for name in _TIME_FIELDS:
        value = parse_time(getattr(fact, name))  # aware UTC; naive times are taken as UTC
        data[name] = value.isoformat() if value is not None else None
    data[SCOPE_FIELD] = ctx.scope
    data[AGENT_FIELD] = ctx.agent_id if ctx.scope == "agent" else None
    data[TERMS_FIELD] = TOKENIZER_VERSION
    if embedder is not None:
        data[EMBEDDER_FIELD] = embedder
    if ctx.scope != "user":
        return {TENANT_FIELD: ctx.tenant_id, **data}
    return {TENANT_FIELD: ctx.tenant_id, USER_FIELD: ctx.user_id, **data}


def fact_of(point_id: str, payload: dict[str, Any]) -> Fact:
    return Fact.from_dict({**payload, "id": point_id})
