"""RuntimeContext: the address of every read and write.

A context is a key, never a container: it holds no memory. Tenant and user ids end up in
filesystem paths and Qdrant filters, so they are validated here, once, before they touch either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from memory_service.errors import InvalidIdError
from memory_service.limits import MAX_ID_CHARS

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


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """Who is asking: tenant and user always; session, trace and span when known.

    ``started_at`` is when the work this context addresses began (its request, command or
    flush; kept by ``with_session``). It is not part of the key (equality and hash ignore
    it): a write for a user erased after it began is refused (``tombstones``), so a request
    that was running during an erase cannot bring the user's data back."""

    tenant_id: str
    user_id: str
    session_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    started_at: datetime = field(default_factory=_now, compare=False, repr=False)

    def __post_init__(self) -> None:
        validate_id(self.tenant_id, "tenant_id")
        validate_id(self.user_id, "user_id")
        if self.session_id is not None:
            validate_id(self.session_id, "session_id")
        for name in ("trace_id", "span_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) > 256):
                raise InvalidIdError(f"invalid {name}: at most 256 characters")

    def with_session(self, session_id: str | None) -> RuntimeContext:
        return replace(self, session_id=session_id)
