"""What both clients share around httpx: headers, the retry rule, and errors out of answers.

Retries are for calls that may safely happen twice: GET, PUT and DELETE are retried on a
connection error, a timeout or a 502/503/504, a few times with exponential backoff; any call
(a POST too) is retried when the connection was refused, since nothing was sent then.
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


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S

    def delay(self, attempt: int) -> float:
        """Seconds before retry ``attempt`` (0-based): 0.25, 0.5, 1, ... at most 4."""
        return min(self.backoff_s * 2**attempt, MAX_BACKOFF_S)

    def retry_error(self, call: Call[Any], exc: httpx.TransportError, attempt: int) -> bool:
        if attempt >= self.max_retries:
            return False
        return call.idempotent or isinstance(exc, httpx.ConnectError)

    def retry_status(self, call: Call[Any], status: int, attempt: int) -> bool:
        return attempt < self.max_retries and call.idempotent and status in RETRY_STATUSES


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
