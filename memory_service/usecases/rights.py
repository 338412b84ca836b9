"""Who may write which memory: a user's own memory takes any writer; the shared agent and
tenant memory a writer with the ``shared_write`` right (a curator or admin key, or the
operator working on the workspace itself). Refused: 403 ``forbidden``, nothing written."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memory_service.domain.errors import ForbiddenError
from memory_service.stores.api_keys import RIGHTS, ROLE_ALIASES, SHARED_MEMORY_ROLES


@dataclass(frozen=True, slots=True)
class Writer:
    """Who writes: ``shared`` says whether it may write the shared memory, ``who`` how the
    refusal names it."""

    who: str
    shared: bool

    @classmethod
    def of_role(cls, role: str) -> Writer:
        """An API key's holder, by its role (an alias read as its role)."""
        rights = RIGHTS.get(ROLE_ALIASES.get(role, role), frozenset())
        return cls(f"this key's role: {role}", "shared_write" in rights)


OPERATOR = Writer("the operator of the workspace", True)  # the CLI: it holds the files
MODEL = Writer("a model's memory tool", False)  # the harness's and MCP's tools: own memory only


def check_writable(writer: Writer, scopes: Iterable[str | None]) -> None:
    """``ForbiddenError`` unless ``writer`` may write every scope named (None: the user's)."""
    shared = sorted({s for s in scopes if s not in (None, "user")})
    if shared and not writer.shared:
        raise ForbiddenError(
            f"writing {' and '.join(shared)} memory needs a {' or '.join(SHARED_MEMORY_ROLES)} "
            f"key ({writer.who})"
        )
