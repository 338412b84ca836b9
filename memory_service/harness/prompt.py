"""The system prompt of an agent call: instructions, MEMORY.md within its token budget (beyond
it, a hint to use memory_search) and recalled facts, by relevance to the input and by
importance, each fact once (by id) and none that MEMORY.md already shows.

Apart from the call itself because it only reads memory: it changes no session and no fact.
"""

from __future__ import annotations

import heapq
from pathlib import Path

from indexing.hashing import content_hash
from memory_service.config.memory_settings import MemorySettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, hide_shadowed
from memory_service.domain.limits import MAX_PAGE_SIZE
from memory_service.domain.messages import estimate_tokens
from memory_service.domain.queries import query_from
from memory_service.harness.outcome import MemoryPrompt, RecalledFact
from memory_service.longterm.files.fact_files import parse_fact_file
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.consolidation import priority
from memory_service.pipeline.memory_md import memory_md_for_model
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.stores.memory_docs.files import documents

DEFAULT_INSTRUCTIONS = """\
You are a helpful assistant with a long-term memory of this user. What you know about them is
below: MEMORY.md (their consolidated memory) and memories recalled for this message. Use it
whenever it matters (respect their allergies, preferences and earlier decisions) without
reciting it unprompted. If something you remember conflicts with what the user says now,
trust the user."""

TOOLS_NOTE = """\
Tools: memory_search finds what you remember (memory_get reads the lines it points to;
memory_search "*" lists it all), memory_save records something important right away,
session_search finds what was said in earlier sessions, memory_extract records a fact under a
key and says what it replaced, memory_recall reads by key or key prefix."""
TIDY_NOTE = """\
memory_consolidate rewrites MEMORY.md now; memory_prune lists expired or unimportant facts
(a dry run unless dry_run is false)."""

# after a recalled fact whose decayed confidence is below the threshold
VERIFY_MARK = "[unverified: old and unconfirmed; ask the user whether it still holds]"
MAX_PRIORITY_SCAN = 10_000  # facts read to pick the most important ones
MEMORY_CONTEXT = "{memory_context}"  # where custom instructions want the memory sections


class PromptBuilder:
    """Builds the memory part of the system prompt for one user's call."""

    def __init__(
        self,
        longterm: LongTermMemory,
        workspace: Path,
        config: MemorySettings,
        *,
        tools_enabled: bool,
        tidy_tools: bool = False,
        docs: MemoryDocs | None = None,
    ) -> None:
        self.longterm = longterm
        self.workspace = Path(workspace)
        self.docs = documents(docs, self.workspace)
        self.config = config
        self.tools_enabled = tools_enabled
        self.tidy_tools = tidy_tools  # memory_consolidate and memory_prune are offered

    @property
    def hooks(self) -> bool:
        return not self.config.disable_memory_hooks

    def system_prompt(self, ctx: RuntimeContext, query: str) -> MemoryPrompt:
        """Instructions + MEMORY.md within budget (else a hint) + recalled facts; instructions
        holding ``{memory_context}`` get the memory sections there (replaced as plain text, so
        other braces stay as written), others get them after the tools note."""
        instructions = self.config.instructions or DEFAULT_INSTRUCTIONS
        parts: list[str] = []
        prompt = MemoryPrompt(text="")
        shown_hashes: set[str] = set()
        if self.hooks:
            budget = self.config.memory_load_token_budget
            shown, memory_md = memory_md_for_model(self.docs.read(ctx), budget)
            if memory_md:
                prompt.memory_md_total_tokens = estimate_tokens(memory_md)
                prompt.memory_md_tokens = estimate_tokens(shown)
                prompt.memory_md_truncated = shown != memory_md
                if shown:
                    parts.append(f"## Long-term memory (MEMORY.md)\n\n{shown}")
                if prompt.memory_md_truncated:
                    parts.append(self._truncation_hint(prompt))
                shown_hashes = {
                    content_hash(line.fact.text)
                    for line in parse_fact_file(shown, default_created_at=None)
                }
            prompt.recalled = self.recall(ctx, query, exclude=shown_hashes)
            if prompt.recalled:
                lines = "\n".join(f"- {r.text}{self._mark(r)}" for r in prompt.recalled)
                parts.append(f"## Recalled memories\n\n{lines}")
        tools = []
        if self.tools_enabled:
            tools.append(f"{TOOLS_NOTE}\n{TIDY_NOTE}" if self.tidy_tools else TOOLS_NOTE)
        if MEMORY_CONTEXT in instructions:
            placed = instructions.replace(MEMORY_CONTEXT, "\n\n".join(parts))
            prompt.text = "\n\n".join([placed, *tools])
        else:
            prompt.text = "\n\n".join([instructions, *tools, *parts])
        return prompt

    def _mark(self, recalled: RecalledFact) -> str:
        """What follows a recalled fact whose confidence decayed below the threshold: the agent
        asks before relying on it, and (with the tools) saving it again confirms it."""
        if not recalled.needs_verification:
            return ""
        if self.tools_enabled:
            return f" {VERIFY_MARK} (if the user says it still holds, memory_save it again)"
        return f" {VERIFY_MARK}"

    def _truncation_hint(self, prompt: MemoryPrompt) -> str:
        size = f"about {prompt.memory_md_tokens} of {prompt.memory_md_total_tokens} tokens"
        if self.tools_enabled:
            return (
                f"(MEMORY.md is longer than shown here: {size}. Use memory_search to look up "
                "anything else you may know about the user.)"
            )
        return f"(MEMORY.md is longer than shown here: {size}.)"

    def recall(
        self, ctx: RuntimeContext, query: str, *, exclude: set[str] | None = None
    ) -> list[RecalledFact]:
        """Facts by relevance to ``query`` (hybrid recall at ``recall_threshold``: none when no
        memory is that close to it), then by importance (``recall_by_importance`` plus the
        relevance slots whose hits were already shown, only facts of at least
        ``recall_importance_floor``: a trivia fact is no fallback), once each (by id); facts
        whose text MEMORY.md already shows (``exclude``, content hashes) are left out. Slots
        the threshold leaves empty stay empty: a message about nothing remembered gets the
        important facts alone, not six more of them."""
        out: list[RecalledFact] = []
        seen: set[str] = set()
        skip = exclude or set()

        def take(fact: Fact, via: str, score: float | None = None) -> bool:
            if fact.id in seen or fact.content_hash in skip:
                return False
            seen.add(fact.id)
            out.append(
                RecalledFact(
                    fact.id,
                    fact.text,
                    via,
                    fact.importance,
                    fact.kind,
                    score,
                    fact.needs_verification,
                )
            )
            return True

        query = query_from(query)
        slots = self.config.recall_by_relevance
        shown = 0  # relevance hits already in the prompt: their slots pass to importance
        if slots and query:
            threshold = self.config.recall_threshold
            for recall in self.longterm.retrieve(ctx, query, slots, threshold):
                shown += not take(recall.fact, "relevance", round(recall.score, 6))
        wanted = self.config.recall_by_importance + shown
        if wanted:
            extra = len(seen) + len(skip)  # enough candidates after dedup
            added = 0
            for fact in self._most_important(ctx, wanted + extra):
                if added >= wanted or fact.importance < self.config.recall_importance_floor:
                    break  # most important first: the rest are below the floor too
                added += take(fact, "importance")
        return out

    def _most_important(self, ctx: RuntimeContext, count: int) -> list[Fact]:
        """The ``count`` most important active facts (newest first among equals) of the
        scopes recall reads (the user's, the agent's, the tenant's), a wider scope's fact
        left out where a narrower one holds its key, as recall does."""
        scopes = [c.scope for c in ctx.visible_scopes()]
        scanned: list[Fact] = []
        cursor: str | None = None
        while len(scanned) < MAX_PRIORITY_SCAN:
            page = self.longterm.list(ctx, limit=MAX_PAGE_SIZE, cursor=cursor, scopes=scopes)
            scanned += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
        return heapq.nsmallest(count, hide_shadowed(scanned), key=priority)
