"""``AsyncMemoryClient``: the same calls as ``MemoryClient``, over ``httpx.AsyncClient``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import anyio
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


def _async(
    build: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncMemoryClient, P], Coroutine[Any, Any, T]]:
    @functools.wraps(build)
    async def method(self: AsyncMemoryClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(build(*args, **kwargs))

    method.__signature__ = method_signature(build, awaitable=True)  # type: ignore[attr-defined]
    return method


class AsyncMemoryClient:
    """``async with AsyncMemoryClient(url, api_key) as client: await client.search(...)``.

    ``MemoryClient``'s arguments, methods and answers, each method awaited;
    ``http_client`` is an ``httpx.AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        headers: dict[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._owned = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._base = base_url.rstrip("/")
        self._headers = headers_for(api_key, headers)
        self.retry = RetryPolicy(max_retries, backoff_s)

    async def send(self, call: Call[T]) -> T:
        """One call, retried as ``RetryPolicy`` allows."""
        attempt = 0
        while True:
            try:
                response = await self._http.request(
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
            await anyio.sleep(wait)
            attempt += 1

    def _args(self, call: Call[Any]) -> dict[str, Any]:
        args = request_args(call)
        args["headers"] = {**self._headers, **(args["headers"] or {})}
        return args

    async def close(self) -> None:
        """Close the HTTP client this one made (one passed in as ``http_client`` stays open)."""
        if self._owned:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    record = _async(calls.record)
    search = _async(calls.search)
    get = _async(calls.get)
    list_memories = _async(calls.list_memories)
    update = _async(calls.update)
    confirm = _async(calls.confirm)
    delete = _async(calls.delete)
    forget = _async(calls.forget)
    erase_user = _async(calls.erase_user)
    list_users = _async(calls.list_users)
    read_memory_md = _async(calls.read_memory_md)
    me = _async(calls.me)
    append = _async(calls.append)
    get_session = _async(calls.get_session)
    list_sessions = _async(calls.list_sessions)
    compact = _async(calls.compact)
    end_session = _async(calls.end_session)
    delete_session = _async(calls.delete_session)
    search_sessions = _async(calls.search_sessions)
    read_tool_result = _async(calls.read_tool_result)
    chat = _async(calls.chat)
    export = _async(calls.export)
    export_user = _async(calls.export_user)
    import_lines = _async(calls.import_lines)
    usage = _async(calls.usage)
    run_maintenance = _async(calls.run_maintenance)
    health = _async(calls.health)
    metrics = _async(calls.metrics)
