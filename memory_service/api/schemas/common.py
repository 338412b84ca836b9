"""What every resource's schemas share: the strict request base, the response base that maps
domain objects, id and size checks, token usage, the error object and the health body.

A check that the domain makes too raises the domain's error through ``coded``, so a mistake
gets the same code in a body, a query or a path as it gets from the service itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo
from pydantic_core import PydanticCustomError

from memory_service.domain.characters import NUL_PROBLEM, check_text
from memory_service.domain.context import validate_id
from memory_service.domain.errors import InvalidIdError, InvalidInputError, MemoryServiceError
from memory_service.domain.facts import TIME_EXAMPLE, InvalidTimeError, parse_time
from memory_service.domain.messages import NUL_CODE

CODE_KEY = "service_code"  # where ``coded`` keeps the code in a pydantic error's context


class Strict(BaseModel):
    """Unknown fields are refused: a typo (or a ``tenant_id``) is a 422, not ignored; so are
    NaN and infinities, which JSON as Python reads it allows ("a finite number", not "less
    than or equal to 1")."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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


def max_bytes(limit: int, code: str) -> Callable[[str], str]:
    """At most ``limit`` bytes of UTF-8, else a 422 with ``code``: the code the service's own
    check of that limit raises, so the CLI, MCP and HTTP answer one mistake alike."""

    def check(value: str) -> str:
        if len(value.encode("utf-8")) > limit:
            problem = f"must be at most {limit} bytes of UTF-8"
            raise coded(InvalidInputError(problem, code=code))
        return value

    return check


def coded(
    exc: MemoryServiceError, *, message: str | None = None, code: str | None = None
) -> PydanticCustomError:
    """``exc`` as a pydantic error that keeps its code (or ``code``): a 422 for it answers with
    that code (see ``api.errors``) rather than ``validation_error``. ``message`` replaces the
    exception's (where the error's location already names the field)."""
    code = code or exc.code
    return PydanticCustomError(
        code, "{message}", {"message": message or exc.message, CODE_KEY: code}
    )


def code_of(error: dict[str, Any]) -> str | None:
    """The service code a pydantic error was raised with by ``coded``, if any."""
    return (error.get("ctx") or {}).get(CODE_KEY)


def no_nul(what: str, code: str = NUL_CODE) -> Callable[[Any], Any]:
    """A check refusing NUL in a value (text or JSON-like data), the one character no text
    field may hold (``characters``), with the ``code`` of what the field belongs to; the
    error's location names the field."""

    def check(value: Any) -> Any:
        try:
            check_text(value, what, code)
        except InvalidInputError as exc:
            raise coded(exc, message=NUL_PROBLEM) from None
        return value

    return check


def _utc(code: str | None) -> Callable[[object, ValidationInfo], object]:
    def check(value: object, info: ValidationInfo) -> object:
        field = info.field_name or "time"
        try:
            if value is None:
                return None
            if value == "" or not isinstance(value, str | datetime):  # parse_time's None, a number
                raise InvalidTimeError(
                    field, f"must be an ISO-8601 time ({TIME_EXAMPLE}), not {value!r}"
                )
            return parse_time(value, field)
        except InvalidTimeError as exc:
            raise coded(exc, message=exc.reason, code=code) from None

    return check


# Every time a request sends is read by the service's own rule (``facts.parse_time``), so the
# API takes what the CLI, an import line and a tool take, and made UTC: one no UTC datetime
# can hold (``0001-01-01T00:00:00+14:00``) is a 422 naming the field, never an overflow
# later. A filter's times answer ``invalid_filter``, as the service's filter check does.
UtcTime = Annotated[datetime, BeforeValidator(_utc(None))]
FilterTime = Annotated[datetime, BeforeValidator(_utc("invalid_filter"))]


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
