"""What every resource's schemas share: the strict request base, the response base that maps
domain objects, id and size checks, token usage, the error object and the health body.

A check that the domain makes too raises the domain's error through ``coded``, so a mistake
gets the same code in a body, a query or a path as it gets from the service itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from memory_service.context import validate_id
from memory_service.errors import InvalidIdError, InvalidInputError, MemoryServiceError
from memory_service.messages import refuse_nul

CODE_KEY = "service_code"  # where ``coded`` keeps the code in a pydantic error's context


class Strict(BaseModel):
    """Unknown fields are refused: a typo (or a ``tenant_id``) is a 422, not ignored."""

    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    """A response body read from a domain object's attributes (``from_attributes``): fields
    that need shaping say so with ``validation_alias`` or a ``BeforeValidator``. It reads its
    own JSON back too (by field name; shaping validators pass wire values through), so the
    Python client returns these very models."""

    model_config = ConfigDict(from_attributes=True, validate_by_name=True, validate_by_alias=True)


class Merged:
    """A domain object's attributes, with the ``extra`` ones added or replaced: what a
    response reads when it holds more than one object has (the path's session id, the state
    next to a result). ``Merged(**extra)`` alone is a plain namespace."""

    __slots__ = ("_base", "_extra")

    def __init__(self, base: object = None, /, **extra: Any) -> None:
        self._base = base
        self._extra = extra

    def __getattr__(self, name: str) -> Any:
        if name in self._extra:
            return self._extra[name]
        if self._base is None:
            raise AttributeError(name)
        return getattr(self._base, name)

    def __repr__(self) -> str:  # validation errors show their input
        return f"Merged({self._base!r}, **{self._extra!r})"


def max_bytes(limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if len(value.encode("utf-8")) > limit:
            raise ValueError(f"must be at most {limit} bytes of UTF-8")
        return value

    return check


def coded(exc: MemoryServiceError) -> PydanticCustomError:
    """``exc`` as a pydantic error that keeps its code: a 422 for it answers with that code
    (see ``api.errors``) rather than ``validation_error``."""
    return PydanticCustomError(exc.code, "{message}", {"message": exc.message, CODE_KEY: exc.code})


def code_of(error: dict[str, Any]) -> str | None:
    """The service code a pydantic error was raised with by ``coded``, if any."""
    return (error.get("ctx") or {}).get(CODE_KEY)


def no_nul(what: str) -> Callable[[Any], Any]:
    """A check refusing NUL in a value (text or JSON-like data) as a message does."""

    def check(value: Any) -> Any:
        try:
            refuse_nul(value, what)
        except InvalidInputError as exc:
            raise coded(exc) from None
        return value

    return check


def _id_of(what: str) -> Callable[[object], object]:
    def check(value: object) -> object:
        try:
            return validate_id(value, what)
        except InvalidIdError as exc:
            raise coded(exc) from None

    return check


# Checked before the type, so any malformed id (a number, too long, a bad character) is
# ``invalid_id``, as ``RuntimeContext`` would say.
UserId = Annotated[str, BeforeValidator(_id_of("user_id"))]
SessionId = Annotated[str, BeforeValidator(_id_of("session_id"))]
AgentId = Annotated[str, BeforeValidator(_id_of("agent_id"))]


class TokenUsage(Out):  # an llm.Usage
    """LLM tokens of one call, or summed over calls."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ErrorOut(Out):  # a MemoryServiceError
    """An error inside a result: its ``code`` and ``message``, as in an error response."""

    code: str
    message: str


class Health(BaseModel):
    status: Literal["ok"]
    backend: str
    version: str
