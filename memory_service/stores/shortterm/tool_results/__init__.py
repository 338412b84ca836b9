"""Tool-result eviction: big tool outputs are kept apart, the state keeps a preview.

A tool result longer than ``max_chars`` is stored whole; the message in the state becomes a
short preview plus a reference (``tool-results/<session>/<id>.txt``), marked ``tool_result``.
The full text is read back by reference, optionally by 1-based inclusive line range. A
reference is valid in its own session only (the context's): the same user's other sessions
are other conversations.

``ToolResultStore`` is what callers type against; the rules a reference and a preview follow
are functions here, so ``FilesToolResultStore`` (``files.py``) and ``PostgresToolResultStore``
(``postgres.py``, replica state) hand out and refuse the same references with the same errors.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Protocol, runtime_checkable

from memory_service.domain.context import RuntimeContext, validate_id
from memory_service.domain.errors import InvalidIdError, InvalidInputError, NotFoundError
from memory_service.domain.messages import Msg
from memory_service.domain.paths import TOOL_RESULTS_DIR
from memory_service.stores.shortterm.session_state import session_of

RESULT_SUFFIX = ".txt"
MAX_RESULT_ID_CHARS = 96


@runtime_checkable
class ToolResultStore(Protocol):
    """Where evicted tool results live (files, or PostgreSQL with replica state there):
    what ``ShortTermMemory``, erase and session delete call. Every implementation hands out
    the same references (``tool-results/<session>/<id>.txt``) and refuses the same ones, so a
    conversation recorded through one resolves its references through another."""

    max_chars: int

    def needs_eviction(self, message: Msg) -> bool: ...

    def evict(self, ctx: RuntimeContext, message: Msg) -> Msg: ...

    def read(
        self,
        ctx: RuntimeContext,
        ref: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str: ...

    def remove_session(self, ctx: RuntimeContext) -> int: ...

    def count_user(self, ctx: RuntimeContext) -> int: ...

    def erase_user(self, ctx: RuntimeContext) -> int: ...

    def discard(self, ctx: RuntimeContext, messages: list[Msg]) -> None: ...


def check_sizes(max_chars: int, preview_chars: int) -> None:
    if max_chars < 1 or preview_chars < 0:
        raise InvalidInputError("max_chars must be positive and preview_chars not negative")


def needs_eviction(message: Msg, max_chars: int) -> bool:
    """Only tool results over the limit, and never one already evicted."""
    return (
        message.role == "tool"
        and message.mark != "tool_result"
        and len(message.content) > max_chars
    )


def result_id_base(message: Msg) -> str:
    """The tool call's id when it is a safe name, else a fresh one (made unique by the store)."""
    try:
        return validate_id(message.tool_call_id, "tool_call_id")[:MAX_RESULT_ID_CHARS]
    except InvalidIdError:
        return uuid.uuid4().hex


def result_ref(session: str, result_id: str) -> str:
    return f"{TOOL_RESULTS_DIR}/{session}/{result_id}{RESULT_SUFFIX}"


def preview_of(message: Msg, ref: str, preview_chars: int) -> Msg:
    """The message the state keeps in place of an evicted one: a header naming ``ref``, the
    first ``preview_chars`` characters, and the size in the metadata."""
    lines = message.content.count("\n") + 1
    preview = message.content[:preview_chars]
    header = (
        f"[tool result stored outside the conversation: {len(message.content)} characters, "
        f"{lines} lines. Full text: {ref} (read it by reference, optionally by line range)]"
    )
    return replace(
        message,
        content=f"{header}\n{preview}" + ("\n[...]" if len(preview) < len(message.content) else ""),
        mark="tool_result",
        metadata={**message.metadata, "ref": ref, "chars": len(message.content), "lines": lines},
    )


def reference_parts(ctx: RuntimeContext, ref: object) -> tuple[str, str]:
    """(session, file name) of ``ref``, refused as text unless it names a tool result of the
    context's session (what a store holds behind it is the store's to check)."""
    if not isinstance(ref, str) or not ref or "\x00" in ref:
        raise InvalidInputError("a tool result reference is a non-empty relative path")
    pure = PurePosixPath(ref.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or pure.parts[:1] != (TOOL_RESULTS_DIR,):
        raise InvalidIdError(
            f"reference {ref!r} must look like {TOOL_RESULTS_DIR}/<session>/<id>.txt",
            code="path_outside_user",
        )
    session = session_of(ctx)
    if len(pure.parts) != 3 or pure.parts[1] != session:
        raise InvalidInputError(
            f"reference {ref!r} is not a tool result of session {session!r}: read it "
            f"through its own session ({TOOL_RESULTS_DIR}/{session}/<id>.txt)",
            code="path_outside_session",
        )
    return pure.parts[1], pure.parts[2]


def check_line_range(start_line: int | None, end_line: int | None) -> None:
    if start_line is not None and start_line < 1:
        raise InvalidInputError("start_line counts from 1")
    if start_line is not None and end_line is not None and end_line < start_line:
        raise InvalidInputError("end_line must not be before start_line")


def line_range(text: str, start_line: int | None, end_line: int | None) -> str:
    """Lines ``start_line..end_line`` of ``text`` (1-based, inclusive), or all of it."""
    if start_line is None and end_line is None:
        return text
    lines = text.splitlines(keepends=True)
    first = (start_line or 1) - 1
    last = end_line if end_line is not None else len(lines)
    return "".join(lines[first:last])


def not_found(ref: str) -> NotFoundError:
    return NotFoundError(f"no tool result {ref!r} for this user")


def evicted_refs(messages: list[Msg]) -> list[str]:
    """The references of the evicted messages among ``messages``."""
    refs = []
    for message in messages:
        ref = message.metadata.get("ref") if message.mark == "tool_result" else None
        if ref:
            refs.append(ref)
    return refs
