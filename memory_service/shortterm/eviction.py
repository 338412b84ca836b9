"""Tool-result eviction: big tool outputs live in files, the state keeps a preview.

A tool result longer than ``max_chars`` is written to
``.../users/<user>/tool-results/<session>/<id>.txt``; the message in the state becomes a short
preview plus a reference (``tool-results/<session>/<id>.txt``), marked ``tool_result``. The
full text is read back by reference, optionally by 1-based inclusive line range. References
are confined to the user's own tool-results folder: absolute paths, ``..`` and symlinks that
lead elsewhere are refused. A reference is valid in its own session only (the context's): the
same user's other sessions are other conversations.

``ToolResultStore`` is what callers type against; the rules a reference and a preview follow
are functions here, so ``eviction_pg.PostgresToolResults`` (results in PostgreSQL, replica
state) hands out and refuses the same references with the same errors.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import uuid
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from memory_service.context import RuntimeContext, validate_id
from memory_service.errors import InvalidIdError, InvalidInputError, NotFoundError
from memory_service.fsutil import write_atomically
from memory_service.messages import Msg
from memory_service.paths import TOOL_RESULTS_DIR, UserPaths
from memory_service.shortterm.store import session_of
from memory_service.tombstones import Tombstones

_NO_SUCH_FILE = {errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP}
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


class ToolResultEvictor:
    """Moves long tool results out of the state into the user's folder and reads them back."""

    def __init__(
        self,
        workspace: Path,
        *,
        max_chars: int = 20_000,
        preview_chars: int = 2_000,
        tombstones: Tombstones | None = None,
    ) -> None:
        check_sizes(max_chars, preview_chars)
        self.workspace = Path(workspace)
        self.max_chars = max_chars
        self.preview_chars = min(preview_chars, max_chars)
        self._tombstones = tombstones or Tombstones(self.workspace)

    def _paths(self, ctx: RuntimeContext) -> UserPaths:
        return UserPaths.of(self.workspace, ctx)

    def needs_eviction(self, message: Msg) -> bool:
        return needs_eviction(message, self.max_chars)

    def evict(self, ctx: RuntimeContext, message: Msg) -> Msg:
        """``message``, or its preview when it is a tool result over the size limit."""
        if not self.needs_eviction(message):
            return message
        paths = self._paths(ctx)
        session = session_of(ctx)
        path = paths.inside(paths.tool_result(session, self._file_id(paths, session, message)))
        self._tombstones.check(ctx)
        write_atomically(path, message.content)
        if self._tombstones.refuses(ctx):  # no lock is shared with an erase: take it back
            path.unlink(missing_ok=True)
            self._tombstones.check(ctx)
        ref = PurePosixPath(path.relative_to(paths.root.resolve())).as_posix()
        return preview_of(message, ref, self.preview_chars)

    @staticmethod
    def _file_id(paths: UserPaths, session: str, message: Msg) -> str:
        """The tool call's id when it is a safe name, made unique within the session."""
        base = result_id_base(message)
        candidate, n = base, 1
        while paths.tool_result(session, candidate).exists():
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def resolve(self, ctx: RuntimeContext, ref: str) -> Path:
        """The file behind ``ref``, refused unless it is inside the tool results of the
        context's session."""
        session, name = reference_parts(ctx, ref)
        paths = self._paths(ctx)
        path = paths.inside(paths.root.joinpath(TOOL_RESULTS_DIR, session, name))
        if paths.tool_results_dir(session).resolve() not in path.parents:
            raise InvalidIdError(
                "reference escapes the tool results folder", code="path_outside_user"
            )
        return path

    def read(
        self,
        ctx: RuntimeContext,
        ref: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        """The evicted text, or lines ``start_line..end_line`` of it (1-based, inclusive)."""
        path = self.resolve(ctx, ref)
        check_line_range(start_line, end_line)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:  # missing, a folder, or a name no file can have (too long)
            if exc.errno not in _NO_SUCH_FILE:
                raise
            raise not_found(ref) from None
        return line_range(text, start_line, end_line)

    def remove_session(self, ctx: RuntimeContext) -> int:
        """Delete a session's evicted results; returns how many files went."""
        paths = self._paths(ctx)
        folder = paths.inside(paths.tool_results_dir(session_of(ctx)))
        if not folder.is_dir():
            return 0
        count = sum(1 for _ in folder.glob("*.txt"))
        shutil.rmtree(folder)
        return count

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many evicted tool results the user has, in every session."""
        root = self._paths(ctx).tool_results_root
        if root.is_symlink() or not root.is_dir():
            return 0
        return sum(1 for p in root.rglob("*") if p.is_file())

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's evicted tool results, every session's; how many files went."""
        paths = self._paths(ctx)
        root = paths.tool_results_root
        if root.is_symlink():
            root.unlink()  # a link planted there: never followed out of the user's folder
            return 0
        count = self.count_user(ctx)
        if root.is_dir():
            shutil.rmtree(paths.inside(root))
        return count

    def discard(self, ctx: RuntimeContext, messages: list[Msg]) -> None:
        """Delete the files of evicted messages that were never saved (a failed append)."""
        for ref in evicted_refs(messages):
            with contextlib.suppress(InvalidInputError, OSError):
                self.resolve(ctx, ref).unlink(missing_ok=True)
