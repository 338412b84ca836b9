"""What every resource's schemas share: the strict request base, the response base that maps
domain objects, id and size checks, token usage, the error object and the health body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict

from memory_service.context import validate_id


class Strict(BaseModel):
    """Unknown fields are refused: a typo (or a ``tenant_id``) is a 422, not ignored."""

    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    """A response body read from a domain object's attributes (``from_attributes``): fields
    that need shaping say so with ``validation_alias`` or a ``BeforeValidator``."""

    model_config = ConfigDict(from_attributes=True)


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


def _id_of(what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        validate_id(value, what)
        return value

    return check


UserId = Annotated[str, AfterValidator(_id_of("user_id"))]
SessionId = Annotated[str, AfterValidator(_id_of("session_id"))]


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
