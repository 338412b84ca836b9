"""What both clients share around httpx: headers, the retry rule, and errors out of answers.

Retries are for calls that may safely happen twice: GET, PUT and DELETE are retried on a
connection error, a timeout or a 502/503/504, a few times with exponential backoff; any call
(a POST too) is retried when the connection was refused, since nothing was sent then, and
when the service answered 503 ``overloaded``, since it refused the request before reading
it, after the ``Retry-After`` it asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from memory_service.client.calls import Call
from memory_service.client.errors import ApiConnectionError, error_for

RETRY_STATUSES = frozenset({502, 503, 504})
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_BACKOFF_S = 0.25
MAX_BACKOFF_S = 4.0
OVERLOADED = "overloaded"  # the service's code for a request it refused unread


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        """Seconds before retry ``attempt`` (0-based): 0.25, 0.5, 1, ... at most 4; at least
        what the answer's ``Retry-After`` asks (in seconds), still at most 4."""
        backoff = min(self.backoff_s * 2**attempt, MAX_BACKOFF_S)
        asked = _retry_after(response) if response is not None else None
        return backoff if asked is None else min(max(asked, backoff), MAX_BACKOFF_S)

    def retry_error(self, call: Call[Any], exc: httpx.TransportError, attempt: int) -> bool:
        if attempt >= self.max_retries:
            return False
        return call.idempotent or isinstance(exc, httpx.ConnectError)

    def retry_status(self, call: Call[Any], response: httpx.Response, attempt: int) -> bool:
        if attempt >= self.max_retries or response.status_code not in RETRY_STATUSES:
            return False
        return call.idempotent or _refused_unread(response)


def _refused_unread(response: httpx.Response) -> bool:
    """A 503 ``overloaded``: the service answered before reading the request."""
    if response.status_code != 503:
        return False
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("code") == OVERLOADED


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is not used by the service)."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def headers_for(api_key: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"Accept": "application/json", **(extra or {})}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def request_args(call: Call[Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"params": call.params or None, "headers": call.headers or None}
    if call.content is not None:
        args["content"] = call.content
    elif call.json is not None:
        args["json"] = call.json
    return args


def result_of(call: Call[Any], response: httpx.Response) -> Any:
    """The call's typed result, or its ``ApiError`` raised."""
    if response.is_success:
        return call.parse(response)
    try:
        payload: Any = response.json()
    except ValueError:
        payload = response.text
    raise error_for(response.status_code, payload)


def unreachable(call: Call[Any], exc: httpx.TransportError) -> ApiConnectionError:
    return ApiConnectionError(f"{call.method} {call.path}: {type(exc).__name__}: {exc}")


def method_signature(build: Callable[..., Any], *, awaitable: bool) -> inspect.Signature:
    """The client method's signature for ``help()``: ``self``, the call's arguments, and
    what the call returns (``Call[X]`` read as ``X``)."""
    sig = inspect.signature(build)
    returns = sig.return_annotation
    if isinstance(returns, str) and returns.startswith("Call[") and returns.endswith("]"):
        returns = returns[len("Call[") : -1]
        returns = f"Coroutine[Any, Any, {returns}]" if awaitable else returns
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[this, *sig.parameters.values()], return_annotation=returns)
