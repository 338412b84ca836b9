"""``MemoryClient``: the API over a blocking ``httpx.Client``."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from memory_service.client import calls
from memory_service.client.calls import Call
from memory_service.client.transport import (
    DEFAULT_BACKOFF_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    RetryPolicy,
    headers_for,
    method_signature,
    request_args,
    result_of,
    unreachable,
)

P = ParamSpec("P")
T = TypeVar("T")


def _sync(build: Callable[P, Call[T]]) -> Callable[Concatenate[MemoryClient, P], T]:
    @functools.wraps(build)
    def method(self: MemoryClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.send(build(*args, **kwargs))

    method.__signature__ = method_signature(build, awaitable=False)  # type: ignore[attr-defined]
    return method


class MemoryClient:
    """``MemoryClient("http://127.0.0.1:8080", api_key)``; results are the API's own models
    (``api.schemas``), errors ``ApiError`` subclasses carrying ``status`` and ``code``.

    ``base_url``: where the service listens; ``api_key``: sent as ``Authorization: Bearer``
    (None: no key, as ``health`` needs none); ``timeout``: seconds per attempt;
    ``max_retries`` and ``backoff_s``: the ``RetryPolicy`` (``transport.py``: which calls are
    retried on what); ``headers``: sent with every request; ``http_client``: an
    ``httpx.Client`` to send through, which ``close`` leaves open.

    One method per operation of the API (``calls.py`` states each): its arguments are the
    operation's parameters under the API's names, checked by the API's request models before
    anything is sent (a bad one is a pydantic ``ValidationError``), and it returns the
    operation's response model, as its signature names it. A service that cannot be reached
    after the retries raises ``ApiConnectionError``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        headers: dict[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._owned = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)
        self._base = base_url.rstrip("/")
        self._headers = headers_for(api_key, headers)
        self.retry = RetryPolicy(max_retries, backoff_s)

    def send(self, call: Call[T]) -> T:
        """One call, retried as ``RetryPolicy`` allows."""
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method, self._base + call.path, **self._args(call)
                )
            except httpx.TransportError as exc:
                if not self.retry.retry_error(call, exc, attempt):
                    raise unreachable(call, exc) from exc
                wait = self.retry.delay(attempt)
            else:
                if not self.retry.retry_status(call, response, attempt):
                    return result_of(call, response)
                wait = self.retry.delay(attempt, response)
            time.sleep(wait)
            attempt += 1

    def _args(self, call: Call[Any]) -> dict[str, Any]:
        args = request_args(call)
        args["headers"] = {**self._headers, **(args["headers"] or {})}
        return args

    def close(self) -> None:
        """Close the HTTP client this one made (one passed in as ``http_client`` stays open)."""
        if self._owned:
            self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    record = _sync(calls.record)
    search = _sync(calls.search)
    get = _sync(calls.get)
    list_memories = _sync(calls.list_memories)
    update = _sync(calls.update)
    confirm = _sync(calls.confirm)
    delete = _sync(calls.delete)
    forget = _sync(calls.forget)
    erase_user = _sync(calls.erase_user)
    list_users = _sync(calls.list_users)
    read_memory_md = _sync(calls.read_memory_md)
    me = _sync(calls.me)
    append = _sync(calls.append)
    get_session = _sync(calls.get_session)
    list_sessions = _sync(calls.list_sessions)
    compact = _sync(calls.compact)
    end_session = _sync(calls.end_session)
    delete_session = _sync(calls.delete_session)
    search_sessions = _sync(calls.search_sessions)
    read_tool_result = _sync(calls.read_tool_result)
    chat = _sync(calls.chat)
    export = _sync(calls.export)
    export_user = _sync(calls.export_user)
    import_lines = _sync(calls.import_lines)
    usage = _sync(calls.usage)
    run_maintenance = _sync(calls.run_maintenance)
    health = _sync(calls.health)
    metrics = _sync(calls.metrics)
