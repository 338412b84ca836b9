"""The memory tools an agent can call, over one workspace:

- ``memory_search(query)``: literal, case-insensitive search over the user's MEMORY.md and daily
  ledgers (``Source: <path>#<line>: <text>``), plus the top hybrid recalls of long-term memory;
- ``memory_get(path, start_line, end_line)``: lines of one memory file, 1-based and inclusive
  (which paths are allowed: ``tools.paths``);
- ``memory_save(text, key?, importance?)``: record one fact directly (no LLM involved);
- ``session_search(query)``: past messages of the user's sessions (the session logs).

Arguments are validated by each tool's model (``tools.arguments``). Every call is scoped to the
``RuntimeContext``'s tenant and user. Errors are returned to the model as text (``run``) so it
can correct itself, and raised as ``InvalidInputError`` by the direct methods.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_service.context import RuntimeContext
from memory_service.errors import InvalidInputError, NotFoundError
from memory_service.facts import Fact, Recall, Source, clip_source_text
from memory_service.fsutil import read_text
from memory_service.limits import MAX_TOOL_GET_CHARS, MAX_TOOL_GET_LINES, MAX_TOOL_SEARCH_LINES
from memory_service.longterm.base import LongTermMemory
from memory_service.messages import (
    MEMORY_GET,
    MEMORY_SAVE,
    MEMORY_SEARCH,
    SESSION_SEARCH,
    Msg,
    ToolCall,
)
from memory_service.pipeline.memory_md import plain_memory
from memory_service.shortterm.session import ShortTermMemory
from memory_service.tools.arguments import (
    TOOL_ARGUMENTS,
    MemoryGetArgs,
    MemorySaveArgs,
    MemorySearchArgs,
    SessionSearchArgs,
)
from memory_service.tools.paths import memory_files, memory_path_parts, resolve

RECALL_TOP_K = 5  # long-term recalls appended to memory_search's literal matches
SESSION_HITS = 10

_BULLET_MARK = re.compile(r"^\s*[-*+]\s+")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call returned to the model; ``ok`` is False for a refused call."""

    call_id: str
    name: str
    text: str
    ok: bool = True
    error_code: str | None = None


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
        self._handlers: dict[str, Callable[[RuntimeContext, Any], str]] = {
            MEMORY_SEARCH: self._search,
            MEMORY_GET: self._get,
            MEMORY_SAVE: self._save,
            SESSION_SEARCH: self._session_search,
        }

    def names(self) -> list[str]:
        if not self.enabled:
            return []
        names = [MEMORY_SEARCH, MEMORY_GET, MEMORY_SAVE]
        return [*names, SESSION_SEARCH] if self.shortterm is not None else names

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list to send with a completion."""
        return [TOOL_ARGUMENTS[name].openai_tool() for name in self.names()]

    # -- dispatch -------------------------------------------------------------------------

    def run(self, ctx: RuntimeContext, call: ToolCall, *, said: Msg | None = None) -> ToolOutcome:
        """Run one tool call; refusals and bad arguments come back as text for the model.
        ``said`` is the user's message of this turn: ``memory_save`` records it as the
        fact's source."""
        if call.name not in self.names():
            available = ", ".join(self.names()) or "none"
            message = f"error (unknown_tool): no tool {call.name!r}; available: {available}"
            return ToolOutcome(call.id, call.name, message, False, "unknown_tool")
        try:
            arguments = TOOL_ARGUMENTS[call.name].parse_json(call.arguments)
            if call.name == MEMORY_SAVE:
                text = self._save(ctx, arguments, said)
            else:
                text = self._handlers[call.name](ctx, arguments)
        except (ValueError, TypeError) as exc:  # InvalidInputError is a ValueError
            code = getattr(exc, "code", "invalid_arguments")
            message = getattr(exc, "message", None) or f"bad arguments: {exc}"
            return ToolOutcome(call.id, call.name, f"error ({code}): {message}", False, code)
        except NotFoundError as exc:
            return ToolOutcome(call.id, call.name, f"error: {exc.message}", False, exc.code)
        return ToolOutcome(call.id, call.name, text)

    # -- the tools, called directly (arguments validated as for the model) -----------------

    def memory_search(self, ctx: RuntimeContext, query: str) -> str:
        """Literal matches in the memory files, then the top hybrid recalls."""
        return self._search(ctx, MemorySearchArgs.parse({"query": query}))

    def memory_get(
        self,
        ctx: RuntimeContext,
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        """Lines ``start_line..end_line`` (1-based, inclusive) of one memory file, without
        the metadata comments; at most ``MAX_TOOL_GET_LINES`` lines at a time."""
        arguments = {"path": path, "start_line": start_line, "end_line": end_line}
        return self._get(ctx, MemoryGetArgs.parse(arguments))

    def memory_save(
        self,
        ctx: RuntimeContext,
        text: str,
        key: str | None = None,
        importance: int | None = None,
        *,
        said: Msg | None = None,
    ) -> str:
        """Record one fact now: no LLM, the same path as ``POST /v1/memories``; ``said`` (the
        user's message it comes from) becomes its source."""
        arguments = {"text": text, "key": key, "importance": importance}
        return self._save(ctx, MemorySaveArgs.parse(arguments), said)

    def session_search(self, ctx: RuntimeContext, query: str) -> str:
        """Past messages of the user's sessions that match ``query``."""
        return self._session_search(ctx, SessionSearchArgs.parse({"query": query}))

    def resolve(self, ctx: RuntimeContext, path: str) -> Path:
        """The memory file ``path`` names, refused unless it really is one of the user's."""
        return resolve(self.workspace, ctx, path)

    # -- implementations, on validated arguments -------------------------------------------

    def _search(self, ctx: RuntimeContext, args: MemorySearchArgs) -> str:
        needle = args.query.casefold()
        lines: list[str] = []
        matches = 0
        for rel, path in memory_files(self.workspace, ctx):
            for number, line in enumerate(read_text(path).split("\n"), start=1):
                plain = _plain_line(line)
                if plain and needle in plain.casefold():
                    matches += 1
                    if len(lines) < MAX_TOOL_SEARCH_LINES:
                        lines.append(f"Source: {rel}#{number}: {_BULLET_MARK.sub('', plain)}")
        if matches > len(lines):
            lines.append(f"({matches - len(lines)} more matching lines not shown)")
        recalls = self.longterm.retrieve(ctx, args.query, RECALL_TOP_K)
        lines += [format_recall(r) for r in recalls]
        return "\n".join(lines) if lines else f"No memory matches {args.query!r}."

    def _get(self, ctx: RuntimeContext, args: MemoryGetArgs) -> str:
        resolved = self.resolve(ctx, args.path)
        rel = "/".join(memory_path_parts(args.path))
        content = read_text(resolved).split("\n")
        if content and content[-1] == "":
            content.pop()  # the final newline ends the last line; it is not a line of its own
        total = len(content)
        first = args.start_line or 1
        if total == 0:
            return f"{rel} is empty."
        if first > total:
            raise InvalidInputError(f"start_line {first} is past the end: {rel} has {total} lines")
        last = min(args.end_line or total, total, first + MAX_TOOL_GET_LINES - 1)
        shown = [_plain_line(line) for line in content[first - 1 : last]]
        body = "\n".join(shown)
        if len(body) > MAX_TOOL_GET_CHARS:
            body = body[:MAX_TOOL_GET_CHARS] + "\n[... cut: ask for fewer lines ...]"
        more = f" (more: start_line={last + 1})" if last < total else ""
        return f"{rel} lines {first}-{last} of {total}{more}:\n{body}"

    def _save(self, ctx: RuntimeContext, args: MemorySaveArgs, said: Msg | None = None) -> str:
        spoken = clip_source_text(said.content) if said is not None else ""
        source = Source(
            origin="memory_save",
            session_id=ctx.session_id,
            messages=(said.seq,) if said is not None and said.seq is not None else (),
            text=spoken or None,
        )
        fact = Fact(
            text=args.text.strip(),
            key=args.key.strip() if args.key else None,
            importance=5 if args.importance is None else args.importance,
            source=source,
            session_id=ctx.session_id,
        )
        result = self.longterm.record(ctx, [fact])[0]
        if result.status == "duplicate":
            return f"Already remembered (id={result.id})."
        if result.status == "superseded":
            older = ", ".join(result.superseded_ids)
            return f"Saved (id={result.id}); it replaces the older fact with this key ({older})."
        return f"Saved (id={result.id})."

    def _session_search(self, ctx: RuntimeContext, args: SessionSearchArgs) -> str:
        if self.shortterm is None:
            raise InvalidInputError("session search is not available in this service")
        hits = self.shortterm.search(ctx, args.query, limit=SESSION_HITS)
        if not hits:
            return f"No past message matches {args.query!r}."
        return "\n".join(
            f"Session {h.session_id}#{h.seq} ({h.role}, {h.at:%Y-%m-%d %H:%M}): {h.snippet}"
            for h in hits
        )
