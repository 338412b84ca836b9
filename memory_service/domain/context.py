"""RuntimeContext: the address of every read and write.

A context is a key, never a container: it holds no memory. Tenant and user ids end up in
filesystem paths and Qdrant filters, so they are validated here, once, before they touch either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Literal

from memory_service.domain.errors import InvalidIdError, InvalidInputError
from memory_service.domain.limits import MAX_ID_CHARS

ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@-]{{0,{MAX_ID_CHARS - 1}}}")


def validate_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is a safe identifier, else raise ``InvalidIdError``."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value) or ".." in value:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise InvalidIdError(
            f"invalid {what} {shown}: use 1-{MAX_ID_CHARS} characters from A-Z a-z 0-9 . _ @ -, "
            "starting with a letter or digit, without '..'"
        )
    return value


def _now() -> datetime:
    return datetime.now(UTC)


# Whose memory a fact is, narrowest first: recall prefers the narrower on the same key.
Scope = Literal["user", "agent", "tenant"]
SCOPES: tuple[Scope, ...] = ("user", "agent", "tenant")


def check_scope(value: object) -> Scope:
    """``value`` if it names a scope, else ``InvalidInputError`` (``invalid_scope``)."""
    if value not in SCOPES:
        raise InvalidInputError(
            f"scope must be one of {', '.join(SCOPES)}, not {value!r}", code="invalid_scope"
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """Who is asking: tenant and user always; session, trace, span and agent when known.

    ``scope`` says whose long-term memory the context addresses: the user's own (the
    default), the agent's (``agent_id``, shared by the agent's users in the tenant) or the
    tenant's (shared by all its users). ``in_scope`` derives the other addresses.

    ``started_at`` is when the work this context addresses began (its request, command or
    flush; kept by ``with_session``). It is not part of the key (equality and hash ignore
    it): a write for a user erased after it began is refused (``tombstones``), so a request
    that was running during an erase cannot bring the user's data back."""

    tenant_id: str
    user_id: str
    session_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    agent_id: str | None = None
    scope: Scope = "user"
    started_at: datetime = field(default_factory=_now, compare=False, repr=False)

    def __post_init__(self) -> None:
        validate_id(self.tenant_id, "tenant_id")
        validate_id(self.user_id, "user_id")
        if self.session_id is not None:
            validate_id(self.session_id, "session_id")
        if self.agent_id is not None:
            validate_id(self.agent_id, "agent_id")
        check_scope(self.scope)
        if self.scope == "agent" and self.agent_id is None:
            raise InvalidInputError("the agent scope needs an agent_id", code="invalid_scope")
        for name in ("trace_id", "span_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) > 256):
                raise InvalidIdError(f"invalid {name}: at most 256 characters")

    def with_session(self, session_id: str | None) -> RuntimeContext:
        return replace(self, session_id=session_id)

    def in_scope(self, scope: str, agent_id: str | None = None) -> RuntimeContext:
        """This caller addressing ``scope`` (the agent's: ``agent_id`` or the context's).
        Its ids were checked when it was made, so only a new agent id is checked again (a
        recall derives three contexts: ``replace`` would check every id of each)."""
        scope, agent_id = check_scope(scope), agent_id or self.agent_id
        if agent_id != self.agent_id:
            return replace(self, scope=scope, agent_id=agent_id)
        if scope == "agent" and self.agent_id is None:
            raise InvalidInputError("the agent scope needs an agent_id", code="invalid_scope")
        copy = object.__new__(RuntimeContext)
        for name in _CONTEXT_FIELDS:
            object.__setattr__(copy, name, getattr(self, name))
        object.__setattr__(copy, "scope", scope)
        return copy

    @property
    def owner(self) -> str:
        """Who owns the addressed memory, within the tenant: the user id, or a marker that no
        valid id can equal (ids never hold control characters), so a tenant fact and a user
        fact with the same text get different fact ids and never share a lock or an index."""
        if self.scope == "agent":
            return f"\x1eagent\x1e{self.agent_id}"
        if self.scope == "tenant":
            return "\x1etenant"
        return self.user_id

    def visible_scopes(self, scopes: Sequence[str] | None = None) -> list[RuntimeContext]:
        """The contexts recall reads, narrowest first: ``scopes`` as named (each once), by
        default the user's, the agent's (when the context names an agent) and the tenant's."""
        if scopes is None:
            scopes = [s for s in SCOPES if s != "agent" or self.agent_id is not None]
        elif not scopes:
            raise InvalidInputError(
                f"scopes must name at least one of {', '.join(SCOPES)}", code="invalid_scope"
            )
        return [self.in_scope(s) for s in SCOPES if s in {check_scope(x) for x in scopes}]


_CONTEXT_FIELDS = tuple(f.name for f in fields(RuntimeContext))

# The user id of a context that addresses shared memory for no user (maintenance, export,
# import): agent and tenant memory is stored without a user, so it never reaches a path.
SCOPE_OWNER_USER = "system"


def scope_context(tenant_id: str, scope: str, agent_id: str | None = None) -> RuntimeContext:
    """A context addressing the agent's or the tenant's memory itself, for no user."""
    agent = agent_id if check_scope(scope) == "agent" else None
    return RuntimeContext(tenant_id, SCOPE_OWNER_USER, agent_id=agent, scope=scope)
