"""The OpenAI Agents SDK's input items as this project's session messages, and back.

A session stores OpenAI chat messages (``Msg``); an Agents SDK session stores Responses API
input items. Each item becomes one message whose text is what compaction, the flush and
session search read, and whose metadata keeps the item itself, so it reads back unchanged:

- a message item (user, system, developer, assistant) -> a message of that role (developer as
  system) with the item's text;
- ``function_call`` -> an assistant message carrying that one tool call (name, arguments);
- ``function_call_output`` -> a tool message answering the call, its text the output; a text
  output is kept only as the message's content, so an output the session evicts (too big)
  reads back as the preview that names the stored full text, as the model would be sent;
- any other item (reasoning, hosted tool calls, or a message or call this mapping cannot type:
  a role it does not know, a call without its id) -> an assistant message with the item's
  visible text (a reasoning summary, say), or none.

Every JSON object is kept, as the SDK's own sessions keep whatever their ``add_items`` is
given (an assistant message without ``id`` or ``status``, a reasoning item whose id the run
omitted): only what is no JSON object, or holds NUL, is refused.

A message that carries no item (a compaction summary, or one appended through the API) reads
back as a plain message item of its role, or as ``function_call`` / ``function_call_output``
items for tool calls and tool results.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memory_service.domain.errors import InvalidInputError
from memory_service.domain.messages import Msg, ToolCall

ITEM_KEY = "agents_item"  # the item, as added, in the message's metadata
OUTPUT_IN_CONTENT = "agents_output_in_content"  # the item's text output is the content

MESSAGE_ROLES = {
    "user": "user",
    "system": "system",
    "developer": "system",
    "assistant": "assistant",
}


class ItemNotJsonError(InvalidInputError, TypeError):
    """An item ``json`` cannot write: the project's invalid input, and the ``TypeError`` the
    SDK's own ``SQLiteSession`` raises for it, so either ``except`` catches it."""


def item_to_msg(item: Mapping[str, Any]) -> Msg:
    """The message that stores ``item``; ``InvalidInputError`` for what no item is."""
    if not isinstance(item, Mapping):
        raise InvalidInputError("an Agents SDK session item must be an object")
    kind = item.get("type")
    try:
        json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ItemNotJsonError(f"an Agents SDK session item must be JSON: {exc}") from None
    role = MESSAGE_ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if kind in (None, "message") and role is not None:
        text = item_text(item.get("content"))
        return Msg(role, text, metadata={ITEM_KEY: dict(item)})  # type: ignore[arg-type]
    if kind == "function_call" and _texts(item, "call_id", "name", "arguments"):
        call = ToolCall(item["call_id"], item["name"], item["arguments"])
        return Msg.assistant("", tool_calls=(call,), metadata={ITEM_KEY: dict(item)})
    if kind == "function_call_output" and _texts(item, "call_id"):
        output = item.get("output")
        if isinstance(output, str):
            kept = {k: v for k, v in item.items() if k != "output"}
            return Msg.tool(
                item["call_id"], output, metadata={ITEM_KEY: kept, OUTPUT_IN_CONTENT: True}
            )
        return Msg.tool(item["call_id"], item_text(output), metadata={ITEM_KEY: dict(item)})
    return Msg.assistant(_visible_text(item), metadata={ITEM_KEY: dict(item)})


def msg_to_items(message: Msg) -> list[dict[str, Any]]:
    """The items ``message`` stands for: the one it stores, or what a chat message reads as."""
    stored = message.metadata.get(ITEM_KEY)
    if isinstance(stored, Mapping):
        item = dict(stored)
        if message.metadata.get(OUTPUT_IN_CONTENT):
            item["output"] = message.content
        return [item]
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content,
            }
        ]
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": message.role, "content": message.content})
    for call in message.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
    return items


def _texts(item: Mapping[str, Any], *fields: str) -> bool:
    """Whether each of ``fields`` is non-empty text (what a typed tool call needs)."""
    return all(isinstance(item.get(f), str) and item.get(f) for f in fields)


def _visible_text(item: Mapping[str, Any]) -> str:
    """What a reader of the transcript would see of an item that is not a message."""
    parts = [item_text(item.get(field)) for field in ("summary", "content")]
    return "\n".join(p for p in parts if p)


def item_text(content: object) -> str:
    """The text of an item's content, as compaction, the flush and search read it: a string,
    or the ``text`` (or ``refusal``) of each part whatever its type (``input_text``,
    ``output_text``, ``summary_text``, ...); parts without text (an image, a file) add
    nothing, since the exact item is kept beside the text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                value = part.get("text", part.get("refusal"))
                if isinstance(value, str):
                    texts.append(value)
        return "\n".join(texts)
    return ""
