"""The memory tools an agent can call, over one workspace:

- ``memory_search(query)``: literal, case-insensitive search over the user's MEMORY.md and daily
  ledgers (``Source: <path>#<line>: <text>``), plus the top hybrid recalls of long-term memory;
- ``memory_get(path, start_line, end_line)``: lines of one memory file, 1-based and inclusive
  (which paths are allowed: ``tools.paths``);
- ``memory_save(text, key?, importance?)``: record one fact directly (no LLM involved);
- ``session_search(query)``: past messages of the user's sessions (the session logs);
- the keyed tools: ``memory_extract(key, text, ...)`` records with the same-key comparison
  (created / unchanged / superseded, with the old text), ``memory_recall(key, prefix?)`` reads
  by key or key prefix, ``memory_consolidate()`` rewrites the caller's MEMORY.md now and
  ``memory_prune(dry_run?, max_importance?)`` forgets expired (and low-importance) facts, a
  dry run by default; ``memory_search("*")`` is their list view.

Arguments are validated by each tool's model (``tools.arguments``). Every call is scoped to the
``RuntimeContext``'s tenant and user. Errors are returned to the model as text (``run``) so it
can correct itself, and raised as ``InvalidInputError`` by the direct methods.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError, MemoryServiceError, NotFoundError
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, RecordResult, Source, clip_source_text, utcnow
from memory_service.domain.limits import (
    MAX_PAGE_SIZE,
    MAX_TOOL_GET_CHARS,
    MAX_TOOL_GET_LINES,
    MAX_TOOL_PRUNE_FACTS,
    MAX_TOOL_RECALL_FACTS,
    MAX_TOOL_SEARCH_LINES,
)
from memory_service.domain.messages import (
    MEMORY_CONSOLIDATE,
    MEMORY_EXTRACT,
    MEMORY_GET,
    MEMORY_PRUNE,
    MEMORY_RECALL,
    MEMORY_SAVE,
    MEMORY_SEARCH,
    SESSION_SEARCH,
    Msg,
    ToolCall,
)
from memory_service.domain.queries import query_from
from memory_service.domain.redaction import describe
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.consolidation import priority
from memory_service.pipeline.maintenance import MemoryMaintenance
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.tools.arguments import (
    TOOL_ARGUMENTS,
    MemoryConsolidateArgs,
    MemoryExtractArgs,
    MemoryGetArgs,
    MemoryPruneArgs,
    MemoryRecallArgs,
    MemorySaveArgs,
    MemorySearchArgs,
    SessionSearchArgs,
)
from memory_service.tools.formatting import ToolOutcome, format_fact, format_recall, plain_line
from memory_service.tools.memory_files import memory_path_parts, memory_text, memory_texts, resolve
from memory_service.usecases.base import Memories
from memory_service.usecases.memories import RecordFacts, SearchFacts, record_facts, search_facts
from memory_service.usecases.rights import MODEL
from memory_service.usecases.sessions import SearchSessions, search_sessions

RECALL_TOP_K = 5  # long-term recalls appended to memory_search's literal matches
SESSION_HITS = 10
LIST_ALL = "*"  # memory_search's query for the list view
MAX_FACT_SCAN = 10_000  # facts read by the list view and memory_recall
DEFAULT_SUMMARY_CHARS = 80  # the list view's text per fact (the harness design's default)
NEAR_KEY_RATIO = 0.85  # memory_extract: keys this alike name one subject
FRAGMENT_SCAN = 10  # memory_extract: recalls looked at for fragments of the new fact
LOW_IMPORTANCE = 5  # a fragment: below the importance that is kept a month
FRAGMENT_MIN_COSINE = 0.5  # a fragment "answers" the new fact: this close in meaning
FRAGMENTS_BEFORE_HINT = 5  # more low-importance fragments than this: hint to merge them

_BULLET_MARK = re.compile(r"^\s*[-*+]\s+")


class MemoryTools:
    """The memory tools over one workspace; ``schemas()`` is empty when they are disabled.
    ``session_search`` needs ``shortterm``; ``memory_consolidate`` and ``memory_prune`` need
    ``maintenance``."""

    def __init__(
        self,
        workspace: Path,
        longterm: LongTermMemory,
        shortterm: ShortTermMemory | None = None,
        *,
        maintenance: MemoryMaintenance | None = None,
        enabled: bool = True,
        docs: MemoryDocs | None = None,
        summary_chars: int = DEFAULT_SUMMARY_CHARS,
    ) -> None:
        self.workspace = Path(workspace)
        self.summary_chars = summary_chars  # the list view's cut (memory_summary_length)
        self.docs = docs  # None: MEMORY.md and its snapshots are files of the workspace
        self.longterm = longterm
        self.shortterm = shortterm
        self.maintenance = maintenance
        self.enabled = enabled
        self.memories = Memories(longterm, self.workspace, shortterm, docs)
        self._handlers: dict[str, Callable[[RuntimeContext, Any], str]] = {
            MEMORY_SEARCH: self._search,
            MEMORY_GET: self._get,
            MEMORY_SAVE: self._save,
            SESSION_SEARCH: self._session_search,
            MEMORY_EXTRACT: self._extract,
            MEMORY_RECALL: self._recall,
            MEMORY_CONSOLIDATE: self._consolidate,
            MEMORY_PRUNE: self._prune,
        }

    def names(self) -> list[str]:
        if not self.enabled:
            return []
        names = [MEMORY_SEARCH, MEMORY_GET, MEMORY_SAVE]
        if self.shortterm is not None:
            names.append(SESSION_SEARCH)
        names += [MEMORY_EXTRACT, MEMORY_RECALL]
        if self.maintenance is not None:
            names += [MEMORY_CONSOLIDATE, MEMORY_PRUNE]
        return names

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
        except MemoryServiceError as exc:  # the model down (consolidate), busy, ...
            text = f"error ({exc.code}): {exc.message}"
            return ToolOutcome(call.id, call.name, text, False, exc.code)
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

    def memory_extract(
        self,
        ctx: RuntimeContext,
        key: str,
        text: str,
        importance: int | None = None,
        kind: str | None = None,
    ) -> str:
        """Record under ``key``; says created / unchanged / superseded (with the old text)."""
        arguments = {"key": key, "text": text, "importance": importance, "kind": kind}
        return self._extract(ctx, MemoryExtractArgs.parse(arguments))

    def memory_recall(self, ctx: RuntimeContext, key: str, prefix: bool = False) -> str:
        """The active facts under ``key`` (or every key starting with it), newest first."""
        return self._recall(ctx, MemoryRecallArgs.parse({"key": key, "prefix": prefix}))

    def memory_consolidate(
        self,
        ctx: RuntimeContext,
        keys_to_merge: list[str] | None = None,
        new_key: str | None = None,
        text: str | None = None,
    ) -> str:
        """Merge the fragments under ``keys_to_merge`` into ``text`` under ``new_key``
        (importance 10); without arguments, rewrite the caller's MEMORY.md now."""
        arguments = {"keys_to_merge": keys_to_merge, "new_key": new_key, "text": text}
        return self._consolidate(ctx, MemoryConsolidateArgs.parse(arguments))

    def memory_prune(
        self,
        ctx: RuntimeContext,
        dry_run: bool = True,
        max_importance: int | None = None,
        ids: list[str] | None = None,
    ) -> str:
        """List (dry run, the default) or delete the facts ``ids`` names, or else the expired
        and low-importance ones."""
        arguments = {"dry_run": dry_run, "max_importance": max_importance, "ids": ids}
        return self._prune(ctx, MemoryPruneArgs.parse(arguments))

    def resolve(self, ctx: RuntimeContext, path: str) -> Path:
        """The memory file ``path`` names, refused unless it really is one of the user's."""
        return resolve(self.workspace, ctx, path)

    # -- implementations, on validated arguments -------------------------------------------

    def _active_facts(
        self, ctx: RuntimeContext, fact_filter: FactFilter | None = None
    ) -> list[Fact]:
        """The user's active facts (those ``fact_filter`` admits), at most ``MAX_FACT_SCAN``."""
        facts: list[Fact] = []
        cursor: str | None = None
        while len(facts) < MAX_FACT_SCAN:
            page = self.longterm.list(ctx, limit=MAX_PAGE_SIZE, cursor=cursor, filter=fact_filter)
            facts += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
        return facts

    def _list_view(self, ctx: RuntimeContext, fact_filter: FactFilter | None = None) -> str:
        facts = sorted(self._active_facts(ctx, fact_filter), key=priority)
        if not facts:
            return "Nothing is remembered about the user yet."
        shown = [format_fact(f, self.summary_chars) for f in facts[:MAX_TOOL_SEARCH_LINES]]
        if len(facts) > len(shown):
            shown.append(f"({len(facts) - len(shown)} more facts not shown: search by words)")
        return f"{len(facts)} facts remembered, most important first:\n" + "\n".join(shown)

    def _search(self, ctx: RuntimeContext, args: MemorySearchArgs) -> str:
        fact_filter = args.fact_filter()
        if args.query == LIST_ALL:
            return self._list_view(ctx, fact_filter)
        search = SearchFacts(ctx, args.query, RECALL_TOP_K, filter=fact_filter)  # checked first
        recalled = [format_recall(r) for r in search_facts(self.memories, search)]
        if fact_filter is not None:  # only recall can filter: no literal file lines
            none = f"No memory matches {args.query!r} and the filter."
            return "\n".join(recalled) if recalled else none
        needle = args.query.casefold()
        lines: list[str] = []
        matches = 0
        for rel, content in memory_texts(self.workspace, ctx, self.docs):
            for number, line in enumerate(content.split("\n"), start=1):
                plain = plain_line(line)
                if plain and needle in plain.casefold():
                    matches += 1
                    if len(lines) < MAX_TOOL_SEARCH_LINES:
                        lines.append(f"Source: {rel}#{number}: {_BULLET_MARK.sub('', plain)}")
        if matches > len(lines):
            lines.append(f"({matches - len(lines)} more matching lines not shown)")
        if not matches and not recalled:
            return f"No memory matches {args.query!r}."
        head = f"{matches} matching line{'' if matches == 1 else 's'}, {len(recalled)} recalled:"
        return "\n".join([head, *lines, *recalled])

    def _get(self, ctx: RuntimeContext, args: MemoryGetArgs) -> str:
        content = memory_text(self.workspace, ctx, args.path, self.docs).split("\n")
        rel = "/".join(memory_path_parts(args.path))
        if content and content[-1] == "":
            content.pop()  # the final newline ends the last line; it is not a line of its own
        total = len(content)
        first = args.start_line or 1
        if total == 0:
            return f"{rel} is empty."
        if first > total:
            raise InvalidInputError(f"start_line {first} is past the end: {rel} has {total} lines")
        last = min(args.end_line or total, total, first + MAX_TOOL_GET_LINES - 1)
        shown = [
            f"{n}|{plain_line(line)}" for n, line in enumerate(content[first - 1 : last], first)
        ]
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
        result = self._record(ctx, fact)
        if result.status == "duplicate":
            answer = f"Already remembered (id={result.id})."
        elif result.status == "merged":
            answer = (
                f"Already remembered in other words (id={result.id}); this wording is kept with it."
            )
        elif result.status == "superseded":
            older = ", ".join(result.superseded_ids)
            answer = f"Saved (id={result.id}); it replaces the older fact with this key ({older})."
        else:
            answer = f"Saved (id={result.id})."
        return _with_redactions(answer, result.redacted)

    def _record(self, ctx: RuntimeContext, fact: Fact) -> RecordResult:
        """One fact into the user's own memory, from inside the call's session."""
        request = RecordFacts(ctx, (fact,), MODEL, in_session=True)
        return record_facts(self.memories, request)[0]

    def _session_search(self, ctx: RuntimeContext, args: SessionSearchArgs) -> str:
        search = SearchSessions(ctx, args.query, SESSION_HITS)
        hits = search_sessions(self.memories, search)
        if not hits:
            return f"No past message matches {args.query!r}."
        return "\n".join(
            f"Session {h.session_id}#{h.seq} ({h.role}, {h.at:%Y-%m-%d %H:%M}): {h.snippet}"
            for h in hits
        )

    # -- the keyed tools -------------------------------------------------------------------

    def _extract(self, ctx: RuntimeContext, args: MemoryExtractArgs) -> str:
        fact = Fact(
            text=args.text.strip(),
            key=args.key,
            kind=args.kind or "fact",
            importance=5 if args.importance is None else args.importance,
            source="memory_extract",
            session_id=ctx.session_id,
        )
        result = self._record(ctx, fact)
        if result.status == "duplicate":
            answer = f"unchanged (id={result.id}): this fact is already kept under {args.key!r}."
        elif result.status == "superseded":
            old = self.longterm.get(ctx, list(result.superseded_ids))
            lines = "\n".join(f"- {f.text} (id={f.id})" for f in old)
            answer = f"superseded (id={result.id}): it replaces under {args.key!r}:\n{lines}"
        else:
            answer = f"created (id={result.id}): nothing was kept under {args.key!r} before."
        answer = _with_redactions(answer, result.redacted)
        return "\n".join([answer, *self._extract_hints(ctx, args)])

    def _extract_hints(self, ctx: RuntimeContext, args: MemoryExtractArgs) -> list[str]:
        """Keep the keyed memory from fragmenting: a key that is nearly one already in use
        (``user.diets`` beside ``user.diet``), and more than ``FRAGMENTS_BEFORE_HINT``
        low-importance facts close in meaning to the new one (merge them into one insight)."""
        hints = []
        keys = {f.key for f in self._active_facts(ctx) if f.key and f.key != args.key}
        near = sorted(k for k in keys if similar_keys(k, args.key))
        if near:
            hints.append(
                f"hint: {', '.join(repr(k) for k in near)} is nearly the same key; keep one "
                "key per subject (memory_consolidate can merge them)."
            )
        recalls = self.longterm.retrieve(ctx, query_from(args.text), FRAGMENT_SCAN)
        fragments = [
            r.fact
            for r in recalls
            if r.fact.importance < LOW_IMPORTANCE
            and (r.scores.get("dense") or 0.0) >= FRAGMENT_MIN_COSINE
        ]
        if len(fragments) > FRAGMENTS_BEFORE_HINT:
            merged = sorted({f.key for f in fragments if f.key})
            hints.append(
                f"hint: {len(fragments)} low-importance fragments answer this "
                f"({', '.join(merged) or 'without keys'}); merge them into one insight with "
                "memory_consolidate(keys_to_merge, new_key, text)."
            )
        return hints

    def _recall(self, ctx: RuntimeContext, args: MemoryRecallArgs) -> str:
        def matches(fact: Fact) -> bool:
            if fact.key is None:
                return False
            return fact.key.startswith(args.key) if args.prefix else fact.key == args.key

        exact = None if args.prefix else FactFilter(key=args.key)  # the store filters it
        found = [f for f in self._active_facts(ctx, exact) if matches(f)]
        found.sort(key=lambda f: (f.key or "", -(f.created_at.timestamp() if f.created_at else 0)))
        what = f"keys starting with {args.key!r}" if args.prefix else f"key {args.key!r}"
        if not found:
            return f"Nothing is remembered under {what}."
        shown = [format_fact(f) for f in found[:MAX_TOOL_RECALL_FACTS]]
        if len(found) > len(shown):
            shown.append(f"({len(found) - len(shown)} more not shown: use a longer prefix)")
        return f"{len(found)} facts under {what}:\n" + "\n".join(shown)

    def _require_maintenance(self) -> MemoryMaintenance:
        if self.maintenance is None:
            raise InvalidInputError("maintenance is not available in this service")
        return self.maintenance

    def _consolidate(self, ctx: RuntimeContext, args: MemoryConsolidateArgs) -> str:
        if args.merges:
            return self._merge(ctx, args)
        result = self._require_maintenance().consolidate_user(ctx)
        if result.refused:
            return f"MEMORY.md unchanged: {result.refused}"
        if not result.written:
            return f"MEMORY.md is already up to date ({result.facts_in} facts)."
        return (
            f"MEMORY.md rewritten ({result.method}): {result.facts_in} facts in, "
            f"{result.bullets_out} bullets out; the previous file was kept as a snapshot."
        )

    def _merge(self, ctx: RuntimeContext, args: MemoryConsolidateArgs) -> str:
        """One insight (importance 10) under ``new_key``; the fragments under the merged
        keys are superseded by it (under ``new_key`` itself by newest-wins, in place)."""
        merged = set(args.keys_to_merge or ())
        fragments = [f for f in self._active_facts(ctx) if f.key in merged]
        if not fragments:
            raise InvalidInputError(
                f"nothing is remembered under {', '.join(sorted(merged))}", code="invalid_fact"
            )
        insight = Fact(
            text=(args.text or "").strip(),
            key=args.new_key,
            kind="fact",
            importance=10,
            source="memory_consolidate",
            session_id=ctx.session_id,
        )
        result = self._record(ctx, insight)
        now = utcnow()
        others = [
            replace(f, superseded_by=result.id, valid_to=now)
            for f in fragments
            if f.key != args.new_key and f.id != result.id
        ]
        if others:
            self.longterm.update(ctx, others)
        lines = "\n".join(f"- {f.text} (id={f.id}, key={f.key})" for f in fragments)
        answer = (
            f"merged {len(fragments)} fragments into one insight under {args.new_key!r} "
            f"(id={result.id}, importance 10)"
        )
        return f"{_with_redactions(answer, result.redacted)}; superseded:\n{lines}"

    def _prune(self, ctx: RuntimeContext, args: MemoryPruneArgs) -> str:
        maintenance = self._require_maintenance()
        if args.ids is not None:
            return self._prune_named(ctx, maintenance, args)
        plan = maintenance.prune_plan(ctx, max_importance=args.max_importance)
        if not plan:
            return "Nothing to prune."
        chosen = plan[:MAX_TOOL_PRUNE_FACTS]
        lines = [f"- [{why}] {f.text} (id={f.id}, importance={f.importance})" for f, why in chosen]
        more = len(plan) - len(chosen)
        if more:
            lines.append(f"({more} more: prune again after this)")
        ids = [f.id for f, _ in chosen if f.id]
        return _pruned(ctx, maintenance, ids, len(plan), lines, dry_run=args.dry_run)

    def _prune_named(
        self, ctx: RuntimeContext, maintenance: MemoryMaintenance, args: MemoryPruneArgs
    ) -> str:
        """The facts the model names as wrong, duplicated or outdated: listed, or deleted
        from the backend and MEMORY.md."""
        wanted = list(dict.fromkeys(args.ids or ()))
        found = {f.id: f for f in self.longterm.get(ctx, wanted)}
        unknown = [i for i in wanted if i not in found]
        lines = [f"- {f.text} (id={f.id}, importance={f.importance})" for f in found.values()]
        if unknown:
            lines.append(f"(not found: {', '.join(unknown)})")
        return _pruned(ctx, maintenance, list(found), len(found), lines, dry_run=args.dry_run)


def _pruned(
    ctx: RuntimeContext,
    maintenance: MemoryMaintenance,
    ids: list[str],
    count: int,
    lines: list[str],
    *,
    dry_run: bool,
) -> str:
    """memory_prune's answer: the listing as a dry run, or the facts ``ids`` deleted."""
    listing = "\n".join(lines)
    if dry_run:
        return (
            f"Would prune {count} facts (dry run: nothing deleted; call again with "
            f"dry_run=false to delete them):\n{listing}"
        )
    return f"Pruned {maintenance.prune(ctx, ids)} facts:\n{listing}"


def similar_keys(a: str, b: str) -> bool:
    """Two keys for one subject: the same once case, separators and a plural ``s`` are set
    aside, or nearly the same spelling (ratio >= ``NEAR_KEY_RATIO``)."""

    def plain(key: str) -> str:
        return re.sub(r"[\s._\-/:]+", ".", key.casefold()).rstrip("s")

    if plain(a) == plain(b):
        return True
    return difflib.SequenceMatcher(None, a.casefold(), b.casefold()).ratio() >= NEAR_KEY_RATIO


def _with_redactions(answer: str, redacted: dict[str, int]) -> str:
    """The tool's answer, and what was replaced before storing (so the model does not say
    the number back as remembered)."""
    note = describe(redacted)
    return f"{answer} ({note})" if note else answer
