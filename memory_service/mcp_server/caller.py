"""Who a tool call acts for: the key's principal, and the user the connection names."""

from __future__ import annotations

from dataclasses import dataclass

from memory_service.api.keys import Principal
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Caller:
    """The tenant always comes from the key. ``user_id`` is the connection's user (the stdio
    flag, the HTTP ``X-Memory-User`` header): an application or curator key acts for it
    alone; an admin key may name another user of its tenant in a tool's ``user_id`` argument.
    A personal key acts for its own user, named or not: another one is ``forbidden_user``."""

    principal: Principal
    user_id: str | None = None

    @property
    def may_choose_user(self) -> bool:
        return self.principal.may("admin")

    def context(self, user_id: str | None = None, session_id: str | None = None) -> RuntimeContext:
        """The call's context; ``user_id`` (an admin key's argument) overrides the connection's;
        a personal key's user is the key's (``Principal.user_for``: another is a 403)."""
        chosen = user_id if (user_id is not None and self.may_choose_user) else self.user_id
        if self.principal.user_id is not None:
            self.principal.user_for(user_id)  # an argument naming another user is refused
            chosen = self.principal.user_for(self.user_id)
        if chosen is None:
            where = "pass user_id, or name" if self.may_choose_user else "name"
            raise InvalidInputError(
                f"no user: {where} the user when connecting (--user / MEMORY_MCP_USER for "
                "stdio, the X-Memory-User header over HTTP)",
                code="no_user",
            )
        return RuntimeContext(self.principal.tenant_id, chosen, session_id)
