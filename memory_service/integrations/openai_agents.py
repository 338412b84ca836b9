"""An OpenAI Agents SDK ``Session`` over this project's sessions, in-process or over HTTP.

``Runner.run(agent, input, session=MemoryServiceSession.in_process(services.shortterm, ctx))``
keeps the conversation in short-term memory, so it gets what the SDK's SQLite session has not:
compaction (a summary message, read back as an item of its role), tool-result eviction (an
evicted output reads back as its preview), the flush of facts into long-term memory and the
session's end. Items map onto messages as ``integrations.agent_items`` describes.

- ``get_items(limit)``: the latest ``limit`` items, oldest first (``None`` or a negative limit:
  all, 0: none), as the SDK's sessions answer.
- ``add_items``: keeps whatever the SDK's ``SQLiteSession`` keeps (any JSON object); an item
  that is no JSON object, or holds NUL, raises ``InvalidInputError`` and none is written.
- ``session_settings``: ``SessionSettings()`` by default; a dict is converted and checked as
  ``SQLiteSession``'s constructor does (an unknown field raises).
- ``pop_item``: removes the latest message and returns its item. In-process it saves the state
  at the version it loaded (a concurrent writer makes it load again). Over HTTP, where no call
  rewrites a session, it deletes the session and appends the rest again: the numbering of the
  session restarts and evicted tool results' full text goes with the old session.
- ``clear_session``: ends the session (its unflushed messages are flushed into long-term
  memory, then the state is cleared); without an LLM there is no flush, so it deletes the
  session instead. A flush that fails raises ``FlushFailedError`` and clears nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # the SDK is an optional extra
    raise ImportError(
        "memory_service.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'memory-service[openai-agents]'"
    ) from exc
from memory_service.client import errors as client_errors
from memory_service.client.sync_client import MemoryClient
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConflictError, InvalidInputError, NotFoundError
from memory_service.domain.messages import Msg
from memory_service.integrations.agent_items import item_to_msg, msg_to_items
from memory_service.llm import LlmNotConfiguredError
from memory_service.shortterm.session import ShortTermMemory

POP_ATTEMPTS = 8  # an in-process pop that loses the save to another writer loads again


def items_as_messages(items: list[Any]) -> list[Msg]:
    """Every item as its message, or ``InvalidInputError`` naming the first bad one."""
    messages = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInputError(
                f"item {index} is {type(item).__name__}: an Agents SDK item is a JSON object"
            )
        try:
            message = item_to_msg(item)
        except InvalidInputError as exc:
            raise type(exc)(f"item {index}: {exc.message}", code=exc.code) from None
        messages.append(message)
    return messages


class SessionMessages(Protocol):
    """Where a session's messages live: the four blocking operations the adapter needs."""

    def messages(self) -> list[Msg]: ...

    def append(self, messages: list[Msg]) -> None: ...

    def pop(self) -> Msg | None: ...

    def clear(self) -> None: ...


class LocalSessionMessages:
    """One session of a ``ShortTermMemory`` in this process."""

    def __init__(self, shortterm: ShortTermMemory, ctx: RuntimeContext) -> None:
        if not ctx.session_id:
            raise InvalidInputError("an Agents SDK session needs a context with a session id")
        self.shortterm = shortterm
        self.ctx = ctx

    def messages(self) -> list[Msg]:
        return self.shortterm.load(self.ctx).messages

    def append(self, messages: list[Msg]) -> None:
        self.shortterm.append(self.ctx, messages)

    def pop(self) -> Msg | None:
        for _ in range(POP_ATTEMPTS):
            state = self.shortterm.load(self.ctx)
            if not state.messages:
                return None
            *rest, last = state.messages
            state.replace_messages(rest)
            try:
                self.shortterm.save(state, self.ctx)
                return last
            except ConflictError:
                continue
        raise ConflictError(
            f"session {self.ctx.session_id!r} kept changing while its last item was removed"
        )

    def clear(self) -> None:
        try:
            self.shortterm.end(self.ctx)
        except NotFoundError:
            return
        except LlmNotConfiguredError:
            self.shortterm.delete(self.ctx)


class ClientSessionMessages:
    """One session of a server, through the shipped client."""

    def __init__(self, client: MemoryClient, user_id: str, session_id: str) -> None:
        self.client = client
        self.user_id = user_id
        self.session_id = session_id

    def messages(self) -> list[Msg]:
        try:
            state = self.client.get_session(self.user_id, self.session_id)
        except client_errors.NotFoundError:
            return []
        return [Msg.from_dict(m.model_dump()) for m in state.messages]

    def append(self, messages: list[Msg]) -> None:
        if messages:
            self.client.append(self.user_id, self.session_id, [_wire(m) for m in messages])

    def pop(self) -> Msg | None:
        messages = self.messages()
        if not messages:
            return None
        *rest, last = messages
        self.client.delete_session(self.user_id, self.session_id)
        if rest:
            wire = [_wire(m) for m in rest]
            self.client.append(self.user_id, self.session_id, wire, expected_version=0)
        return last

    def clear(self) -> None:
        try:
            self.client.end_session(self.user_id, self.session_id)
        except client_errors.NotFoundError:
            return
        except client_errors.ServiceUnavailableError as exc:
            if exc.code != LlmNotConfiguredError.code:
                raise
            self.client.delete_session(self.user_id, self.session_id)


def _wire(message: Msg) -> dict[str, Any]:
    """A stored message as the append call takes it (its metadata keeps the item)."""
    return {**message.to_openai(), "metadata": dict(message.metadata)}


class MemoryServiceSession:
    """The Agents SDK's ``Session`` protocol over this project's session messages."""

    def __init__(
        self,
        session_id: str,
        store: SessionMessages,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)  # type: ignore[arg-type]
        )
        self.store = store

    @classmethod
    def in_process(
        cls,
        shortterm: ShortTermMemory,
        ctx: RuntimeContext,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> MemoryServiceSession:
        """The session ``ctx`` names (tenant, user, session) in ``shortterm``."""
        store = LocalSessionMessages(shortterm, ctx)
        return cls(ctx.session_id or "", store, session_settings=session_settings)

    @classmethod
    def over_http(
        cls,
        client: MemoryClient,
        user_id: str,
        session_id: str,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> MemoryServiceSession:
        """The user's session on the server ``client`` talks to (tenant: the client's key)."""
        store = ClientSessionMessages(client, user_id, session_id)
        return cls(session_id, store, session_settings=session_settings)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        messages = await asyncio.to_thread(self.store.messages)
        items = [item for message in messages for item in msg_to_items(message)]
        if wanted is not None and wanted > 0:
            items = items[-wanted:]
        return items  # type: ignore[return-value]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        messages = items_as_messages(list(items))
        if messages:
            await asyncio.to_thread(self.store.append, messages)

    async def pop_item(self) -> TResponseInputItem | None:
        popped = await asyncio.to_thread(self.store.pop)
        if popped is None:
            return None
        return msg_to_items(popped)[-1]  # type: ignore[return-value]

    async def clear_session(self) -> None:
        await asyncio.to_thread(self.store.clear)
