"""The memory tools an agent can call: OpenAI function schemas and their implementations.

- ``memory_search(query)``: literal, case-insensitive search over the user's MEMORY.md and daily
  ledgers (``Source: <path>#<line>: <text>``), plus the top hybrid recalls of long-term memory;
- ``memory_get(path, start_line, end_line)``: lines of one memory file, 1-based and inclusive.
  The path is relative to the user's folder and must name MEMORY.md or a ledger under
  ``memory/``; absolute paths, ``..``, backslashes, percent-encoding, control characters,
  non-ASCII look-alikes and symlinks that lead elsewhere are refused with a clear error;
- ``memory_save(text, key?, importance?)``: record one fact directly (no LLM involved);
- ``session_search(query)``: past messages of the user's sessions (the session logs).

Every call is scoped to the ``RuntimeContext``'s tenant and user: the model names files, never
users. Errors are returned to the model as text (``run``) so it can correct itself, and raised
as ``InvalidInputError`` by the direct methods.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_service.context import RuntimeContext
from memory_service.errors import InvalidIdError, InvalidInputError, NotFoundError
from memory_service.facts import Fact, Recall
from memory_service.fsutil import read_text
from memory_service.longterm.base import LongTermMemory
from memory_service.messages import (
    MEMORY_GET,
    MEMORY_SAVE,
    MEMORY_SEARCH,
    SESSION_SEARCH,
    ToolCall,
)
from memory_service.paths import UserPaths
from memory_service.pipeline.consolidation import plain_memory
from memory_service.shortterm.session import ShortTermMemory

MAX_QUERY_CHARS = 1_000
MAX_PATH_CHARS = 512
MAX_SEARCH_LINES = 50
RECALL_TOP_K = 5
SESSION_HITS = 10
MAX_GET_LINES = 400
MAX_GET_CHARS = 20_000

_SAFE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.md")
_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")
_DRIVE = re.compile(r"^[A-Za-z]:")
_BULLET_MARK = re.compile(r"^\s*[-*+]\s+")

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    MEMORY_SEARCH: {
        "type": "function",
        "function": {
            "name": MEMORY_SEARCH,
            "description": "Search the user's long-term memory: a literal, case-insensitive "
            "match over MEMORY.md and the daily memory files (lines as 'Source: path#line: "
            "text'), plus the memories most related to the query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words or a phrase to find"}
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    MEMORY_GET: {
        "type": "function",
        "function": {
            "name": MEMORY_GET,
            "description": "Read lines of one memory file, e.g. a 'Source' that memory_search "
            "returned. Paths are relative: MEMORY.md or memory/YYYY-MM-DD.md.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "MEMORY.md or memory/<file>.md"},
                    "start_line": {"type": "integer", "minimum": 1, "description": "1-based"},
                    "end_line": {"type": "integer", "minimum": 1, "description": "inclusive"},
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    MEMORY_SAVE: {
        "type": "function",
        "function": {
            "name": MEMORY_SAVE,
            "description": "Remember one durable fact about the user right away (a stable "
            "fact, preference, decision or commitment), as one self-contained sentence.",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "the fact, one sentence"},
                    "key": {
                        "type": "string",
                        "description": "optional subject such as user.diet: a newer fact "
                        "with the same key replaces the older one",
                    },
                    "importance": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 10,
                        "description": "10: never forget (e.g. allergies); 1: trivia",
                    },
                },
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    },
    SESSION_SEARCH: {
        "type": "function",
        "function": {
            "name": SESSION_SEARCH,
            "description": "Find messages said in the user's past sessions (verbatim "
            "history, not curated memory).",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "words to find"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
}


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call returned to the model; ``ok`` is False for a refused call."""

    call_id: str
    name: str
    text: str
    ok: bool = True
    error_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name, "ok": self.ok, "error": self.error_code}


def _refuse(message: str, code: str = "invalid_path") -> InvalidInputError:
    if code == "path_outside_user":
        return InvalidIdError(message, code=code)
    return InvalidInputError(message, code=code)


def memory_path_parts(path: object) -> tuple[str, ...]:
    """The parts of a memory file path, or a clear error. Checks the text only; symlinks are
    checked when the path is resolved."""
    if not isinstance(path, str) or not path.strip():
        raise _refuse("path must be a relative path such as MEMORY.md or memory/2025-01-31.md")
    if len(path) > MAX_PATH_CHARS:
        raise _refuse(f"path is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in path or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise _refuse("path must not contain NUL or control characters")
    if _ENCODED.search(path):
        raise _refuse("percent-encoded characters are not allowed in a path")
    if not path.isascii():
        raise _refuse("path must be plain ASCII (no look-alike dots or slashes)")
    if "\\" in path:
        raise _refuse("use '/' as the path separator, not '\\'")
    if path.startswith(("/", "~")) or _DRIVE.match(path):
        raise _refuse(
            "absolute paths are refused: give a path relative to your memory folder",
            "path_outside_user",
        )
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise _refuse("'..' is refused: paths stay inside your memory folder", "path_outside_user")
    if parts == ("MEMORY.md",):
        return parts
    in_ledgers = len(parts) == 2 or (len(parts) == 3 and parts[1] == "archive")
    if parts and parts[0] == "memory" and in_ledgers and _SAFE_FILE.fullmatch(parts[-1]):
        return parts
    raise _refuse(
        f"{path!r} is not a memory file: use MEMORY.md, memory/<file>.md or "
        "memory/archive/<file>.md"
    )


def _int_arg(value: object, name: str) -> int | None:
    """An integer argument; models sometimes send "3" or 3.0 for 3."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInputError(f"{name} must be an integer")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int):
        return value
    raise InvalidInputError(f"{name} must be an integer")


def _query(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError("query must be non-empty text")
    if len(value) > MAX_QUERY_CHARS or "\x00" in value:
        raise InvalidInputError(f"query must be at most {MAX_QUERY_CHARS} characters, no NUL")
    return value.strip()


def _plain_line(line: str) -> str:
    return plain_memory(line).strip()


def format_recall(recall: Recall) -> str:
    legs = ", ".join(f"{leg} #{rank}" for leg, rank in recall.ranks.items() if rank is not None)
    return f"Recall: {recall.fact.text} (id={recall.fact.id}, score={recall.score:.4f}, {legs})"


class MemoryTools:
    """The four tools over one workspace; ``schemas()`` is empty when they are disabled."""

    def __init__(
        self,
        workspace: Path,
        longterm: LongTermMemory,
        shortterm: ShortTermMemory | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        self.workspace = Path(workspace)
        self.longterm = longterm
        self.shortterm = shortterm
        self.enabled = enabled

    def names(self) -> list[str]:
        if not self.enabled:
            return []
        names = [MEMORY_SEARCH, MEMORY_GET, MEMORY_SAVE]
        return [*names, SESSION_SEARCH] if self.shortterm is not None else names

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list to send with a completion."""
        return [TOOL_SCHEMAS[name] for name in self.names()]

    # -- dispatch -------------------------------------------------------------------------

    def run(self, ctx: RuntimeContext, call: ToolCall) -> ToolOutcome:
        """Run one tool call; refusals and bad arguments come back as text for the model."""
        handlers: dict[str, Callable[..., str]] = {
            MEMORY_SEARCH: lambda query: self.memory_search(ctx, query),
            MEMORY_GET: lambda path, start_line=None, end_line=None: self.memory_get(
                ctx, path, start_line, end_line
            ),
            MEMORY_SAVE: lambda text, key=None, importance=None: self.memory_save(
                ctx, text, key, importance
            ),
            SESSION_SEARCH: lambda query: self.session_search(ctx, query),
        }
        if call.name not in self.names():
            available = ", ".join(self.names()) or "none"
            message = f"error (unknown_tool): no tool {call.name!r}; available: {available}"
            return ToolOutcome(call.id, call.name, message, False, "unknown_tool")
        try:
            arguments = json.loads(call.arguments or "{}")
            if not isinstance(arguments, Mapping):
                raise InvalidInputError("tool arguments must be a JSON object")
            text = handlers[call.name](**arguments)
        except (ValueError, TypeError) as exc:  # InvalidInputError is a ValueError
            code = getattr(exc, "code", "invalid_arguments")
            said = str(exc).replace("<lambda>() ", "")
            message = getattr(exc, "message", None) or f"bad arguments: {said}"
            return ToolOutcome(call.id, call.name, f"error ({code}): {message}", False, code)
        except NotFoundError as exc:
            return ToolOutcome(call.id, call.name, f"error: {exc.message}", False, exc.code)
        return ToolOutcome(call.id, call.name, text)

    # -- the tools ------------------------------------------------------------------------

    def memory_search(self, ctx: RuntimeContext, query: str) -> str:
        """Literal matches in the memory files, then the top hybrid recalls."""
        needle = _query(query).casefold()
        lines: list[str] = []
        matches = 0
        for rel, path in self._memory_files(ctx):
            for number, line in enumerate(read_text(path).split("\n"), start=1):
                plain = _plain_line(line)
                if plain and needle in plain.casefold():
                    matches += 1
                    if len(lines) < MAX_SEARCH_LINES:
                        lines.append(f"Source: {rel}#{number}: {_BULLET_MARK.sub('', plain)}")
        if matches > len(lines):
            lines.append(f"({matches - len(lines)} more matching lines not shown)")
        recalls = self.longterm.retrieve(ctx, query.strip(), RECALL_TOP_K)
        lines += [format_recall(r) for r in recalls]
        return "\n".join(lines) if lines else f"No memory matches {query.strip()!r}."

    def memory_get(
        self,
        ctx: RuntimeContext,
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        """Lines ``start_line..end_line`` (1-based, inclusive) of one memory file, without
        the metadata comments; at most ``MAX_GET_LINES`` lines at a time."""
        first, last = _int_arg(start_line, "start_line"), _int_arg(end_line, "end_line")
        if first is not None and first < 1:
            raise InvalidInputError("start_line counts from 1")
        if last is not None and last < 1:
            raise InvalidInputError("end_line counts from 1")
        if first is not None and last is not None and last < first:
            raise InvalidInputError("end_line must not be before start_line")
        resolved = self.resolve(ctx, path)
        rel = "/".join(memory_path_parts(path))
        content = read_text(resolved).split("\n")
        if content and content[-1] == "":
            content.pop()  # the final newline ends the last line; it is not a line of its own
        total = len(content)
        first = first or 1
        if total == 0:
            return f"{rel} is empty."
        if first > total:
            raise InvalidInputError(f"start_line {first} is past the end: {rel} has {total} lines")
        last = min(last or total, total, first + MAX_GET_LINES - 1)
        shown = [_plain_line(line) for line in content[first - 1 : last]]
        body = "\n".join(shown)
        if len(body) > MAX_GET_CHARS:
            body = body[:MAX_GET_CHARS] + "\n[... cut: ask for fewer lines ...]"
        more = f" (more: start_line={last + 1})" if last < total else ""
        return f"{rel} lines {first}-{last} of {total}{more}:\n{body}"

    def memory_save(
        self,
        ctx: RuntimeContext,
        text: str,
        key: str | None = None,
        importance: int | None = None,
    ) -> str:
        """Record one fact now: no LLM, the same path as ``POST /v1/memories``."""
        if not isinstance(text, str):
            raise InvalidInputError("text must be a string")
        if key is not None and not isinstance(key, str):
            raise InvalidInputError("key must be a string")
        level = _int_arg(importance, "importance")
        fact = Fact(
            text=text.strip(),
            key=key.strip() if key else None,
            importance=5 if level is None else level,
            source="memory_save",
            session_id=ctx.session_id,
        )
        result = self.longterm.record(ctx, [fact])[0]
        if result.status == "duplicate":
            return f"Already remembered (id={result.id})."
        if result.status == "superseded":
            older = ", ".join(result.superseded_ids)
            return f"Saved (id={result.id}); it replaces the older fact with this key ({older})."
        return f"Saved (id={result.id})."

    def session_search(self, ctx: RuntimeContext, query: str) -> str:
        """Past messages of the user's sessions that match ``query``."""
        if self.shortterm is None:
            raise InvalidInputError("session search is not available in this service")
        hits = self.shortterm.search(ctx, _query(query), limit=SESSION_HITS)
        if not hits:
            return f"No past message matches {query.strip()!r}."
        return "\n".join(
            f"Session {h.session_id}#{h.seq} ({h.role}, {h.at:%Y-%m-%d %H:%M}): {h.snippet}"
            for h in hits
        )

    # -- paths ----------------------------------------------------------------------------

    def resolve(self, ctx: RuntimeContext, path: str) -> Path:
        """The memory file ``path`` names, refused unless it really is one of the user's."""
        parts = memory_path_parts(path)
        paths = UserPaths.of(self.workspace, ctx)
        resolved = paths.inside(paths.root.joinpath(*parts))
        allowed = paths.memory_md.resolve()
        if resolved != allowed and paths.ledger_dir.resolve() not in resolved.parents:
            raise _refuse(f"{path!r} leads outside your memory files", "path_outside_user")
        if not resolved.is_file():
            raise NotFoundError(f"no memory file {path!r}")
        return resolved

    def _memory_files(self, ctx: RuntimeContext) -> list[tuple[str, Path]]:
        """MEMORY.md, then the daily ledgers newest first (archived ledgers are not searched);
        a file that is a link out of the user's folder is skipped."""
        paths = UserPaths.of(self.workspace, ctx)
        found = [("MEMORY.md", paths.memory_md)]
        if paths.ledger_dir.is_dir():
            ledgers = sorted(paths.ledger_dir.glob("*.md"), reverse=True)
            found += [(f"memory/{p.name}", p) for p in ledgers]
        usable = []
        for rel, path in found:
            try:
                self.resolve(ctx, rel)
            except (InvalidInputError, NotFoundError):
                continue
            usable.append((rel, path))
        return usable
