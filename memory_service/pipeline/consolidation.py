"""Consolidation: rewrite a user's MEMORY.md from the facts that are still true.

With a model, the consolidation prompt (two ``%d``: max tokens, then max characters) gets the
current MEMORY.md and the active facts; without one, a deterministic merge groups facts by kind
and keeps the most important and newest within the token budget. Either way the previous
MEMORY.md is snapshotted in the same write (``memory_docs``: files, or PostgreSQL), and a
rewrite that would lose more than ``max_loss`` of the facts MEMORY.md held is refused: a
summariser that drops a quarter of what it was given is broken, not concise.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from indexing.hashing import content_hash
from indexing.tokenize import tokenize
from memory_service.config.memory_settings import validate_consolidation_prompt
from memory_service.domain.context import RuntimeContext, check_scope
from memory_service.domain.facts import FACT_KINDS, Fact
from memory_service.domain.messages import estimate_tokens
from memory_service.domain.paths import OwnerPaths
from memory_service.llm import ChatModel, LlmBadResponseError, Usage
from memory_service.longterm.files.fact_files import parse_line, render_fact
from memory_service.observe.telemetry import sink
from memory_service.pipeline.memory_md import memory_bullets, plain_memory
from memory_service.stores.memory_docs import STAMP_FORMAT, MemoryDocs, Snapshot
from memory_service.stores.memory_docs.files import documents

log = logging.getLogger(__name__)

DEFAULT_CONSOLIDATION_PROMPT = """\
You maintain MEMORY.md, the long-term memory file of one user of an AI assistant.
Rewrite it from the current file and the facts below. Rules:
- Keep every fact that is still true; when two facts conflict, keep the newer one.
- Merge duplicates and near-duplicates into one bullet; drop nothing else.
- Group bullets under short Markdown headings (## Preferences, ## Facts, ## Events, ...).
- One fact per bullet, each starting with "- ". No commentary before or after the file.
- Stay within %d tokens (about %d characters).
"""

SECTION_TITLES = {
    "fact": "Facts",
    "preference": "Preferences",
    "event": "Events",
    "procedure": "Procedures",
}
COVERAGE_MIN = 0.6  # share of a fact's terms one bullet must hold to count as keeping it


@dataclass(frozen=True, slots=True)
class ConsolidationResult:
    method: str  # "llm" | "deterministic"
    written: bool
    facts_in: int  # facts given to consolidation
    bullets_out: int
    lost: int  # facts of the old MEMORY.md not found in the new one
    refused: str | None = None
    snapshot: str | None = None  # where the old MEMORY.md went: a file, or a name in PostgreSQL
    usage: Usage | None = None

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "written": self.written,
            "facts_in": self.facts_in,
            "bullets_out": self.bullets_out,
            "lost": self.lost,
            "refused": self.refused,
            "snapshot": self.snapshot,
            "usage": self.usage.to_dict() if self.usage else None,
        }


def priority(fact: Fact) -> tuple:
    """Most important first, then newest."""
    return (-fact.importance, -(fact.created_at.timestamp() if fact.created_at else 0.0))


def deterministic_memory(facts: Sequence[Fact], max_tokens: int, now: datetime) -> str:
    """MEMORY.md from ``facts``: by kind, most important and newest first, within budget.

    Bullets keep their metadata comment, so ids and keys survive (the files backend reads
    MEMORY.md as facts); the budget counts the text a model would see, not the comments."""
    chosen: list[Fact] = []
    used = estimate_tokens("# Long-term memory\n") + 16
    for fact in sorted(facts, key=priority):
        cost = estimate_tokens(fact.text) + 2
        if used + cost > max_tokens:
            continue
        chosen.append(fact)
        used += cost
    lines = [
        "# Long-term memory",
        "",
        f"_Consolidated {now.isoformat(timespec='seconds')}. Edit freely: the service reads "
        "this file back._",
    ]
    for kind in FACT_KINDS:
        group = [f for f in chosen if f.kind == kind]
        if group:
            lines += ["", f"## {SECTION_TITLES[kind]}", ""]
            # a bullet states the fact; its other wordings stay with it in the fact files
            lines += [render_fact(replace(f, phrasings=()), of=[f.content_hash]) for f in group]
    return "\n".join(lines) + "\n"


def _keeps(bullet: Fact, bullet_terms: set[str], fact: Fact, fact_terms: set[str]) -> bool:
    """Whether ``bullet`` states ``fact``: the same text, or most of its terms."""
    if content_hash(bullet.text) == content_hash(fact.text):
        return True
    return bool(fact_terms) and len(fact_terms & bullet_terms) / len(fact_terms) >= COVERAGE_MIN


def with_sources(markdown: str, facts: Sequence[Fact]) -> str:
    """A model's MEMORY.md with each bullet naming the facts of ``facts`` it states (``of``),
    so a later hand edit or delete of one of them is seen (``files.index``); a bullet that
    states none of them stands on its own, as one written by hand does."""
    fact_terms = [(f, set(tokenize(f.text))) for f in facts if f.content_hash]
    out = []
    for line in markdown.split("\n"):
        bullet = parse_line(line, default_created_at=None)
        if bullet is None:
            out.append(line)
            continue
        terms = set(tokenize(bullet.text))
        of = [f.content_hash for f, ft in fact_terms if _keeps(bullet, terms, f, ft)]
        out.append(render_fact(bullet, of=of) if of else line)
    return "\n".join(out)


def lost_facts(old: Sequence[Fact], new_markdown: str) -> list[Fact]:
    """Facts of ``old`` that no bullet of ``new_markdown`` keeps (same text, or most terms)."""
    bullets = [(b, set(tokenize(b.text))) for b in memory_bullets(new_markdown)]
    missing = []
    for fact in old:
        terms = set(tokenize(fact.text))
        if not any(_keeps(b, bt, fact, terms) for b, bt in bullets):
            missing.append(fact)
    return missing


def _undated(markdown: str) -> str:
    return re.sub(r"(?m)^_Consolidated [^\n]*_$", "", markdown)


def _strip_fences(text: str) -> str:
    text = text.strip()
    fenced = re.match(r"^```[a-zA-Z]*\n(.*)\n```$", text, re.DOTALL)
    return (fenced.group(1) if fenced else text).strip() + "\n"


class Consolidator:
    """Writes MEMORY.md for one user at a time, into ``docs`` (None: the files of the
    workspace the caller's paths name)."""

    def __init__(
        self,
        *,
        model: ChatModel | None,
        max_tokens: int = 4000,
        prompt: str | None = None,
        max_loss: float = 0.25,
        docs: MemoryDocs | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.prompt = validate_consolidation_prompt(prompt or DEFAULT_CONSOLIDATION_PROMPT)
        self.max_loss = max_loss
        self.docs = docs

    def documents(self, workspace: Path) -> MemoryDocs:
        """Where this consolidator's MEMORY.md lives, for the readers beside it."""
        return documents(self.docs, workspace)

    def consolidate(
        self,
        paths: OwnerPaths,
        facts: Sequence[Fact],
        now: datetime,
        *,
        ctx: RuntimeContext | None = None,
    ) -> ConsolidationResult:
        """Rewrite the MEMORY.md of ``paths``' owner from ``facts`` (all of the owner's, active
        or not), keeping the old one as a snapshot. With ``ctx`` (the caller's), the write is
        refused (``UserErasedError``) when the user was erased since its work began: ``facts``
        were read before the erase.

        The loss guard counts the bullets of the old MEMORY.md that are still true: a bullet
        whose fact has since been superseded, expired or deleted may go. Raises the
        ``LlmError`` family when the model fails twice; MEMORY.md is then untouched."""
        owner = ctx if ctx is not None else _context_of(paths)
        docs = self.documents(paths.workspace)
        old_text = docs.read(owner)
        active = [f for f in facts if f.is_active(now)]
        gone = {f.content_hash for f in facts if not f.is_active(now)}
        held = [b for b in memory_bullets(old_text) if content_hash(b.text) not in gone]
        usage = None
        if self.model is not None:
            method = "llm"
            new_text, usage = self._ask_model(old_text, active)
            new_text = with_sources(new_text, active)
        else:
            method = "deterministic"
            new_text = deterministic_memory(active, self.max_tokens, now)
        lost = lost_facts(held, new_text)
        bullets = len(memory_bullets(new_text))
        result = dict(method=method, facts_in=len(active), bullets_out=bullets, usage=usage)
        if held and len(lost) > self.max_loss * len(held):
            reason = (
                f"the rewrite would lose {len(lost)} of the {len(held)} facts MEMORY.md holds "
                f"(more than {self.max_loss:.0%}); MEMORY.md left unchanged"
            )
            log.warning(
                "consolidation refused for %s/%s: %s", paths.tenant_id, paths.user_id, reason
            )
            return ConsolidationResult(written=False, lost=len(lost), refused=reason, **result)
        if _undated(new_text) == _undated(old_text):
            return ConsolidationResult(written=False, lost=0, **result)  # nothing but the date
        stamp = now.strftime(STAMP_FORMAT)
        snapshot = docs.write(
            owner, new_text, snapshot=Snapshot(stamp, old_text), check=ctx is not None
        )
        return ConsolidationResult(written=True, lost=len(lost), snapshot=snapshot, **result)

    def _ask_model(self, old_text: str, active: Sequence[Fact]) -> tuple[str, Usage]:
        assert self.model is not None
        system = self.prompt % (self.max_tokens, self.max_tokens * 4)
        facts = "\n".join(f"- {f.text}" for f in sorted(active, key=priority))
        user = (
            "Current MEMORY.md:\n\n"
            + (plain_memory(old_text).strip() or "(empty)")
            + "\n\nFacts that are true now (most important first):\n\n"
            + (facts or "(none)")
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        usage = Usage()
        for attempt in range(2):
            reply = self.model.complete(messages, temperature=0.0, max_tokens=self.max_tokens)
            usage = usage + reply.usage
            sink().tokens("consolidation", reply.usage.prompt_tokens, reply.usage.completion_tokens)
            text = _strip_fences(reply.text or "")
            if memory_bullets(text):
                return text, usage
            log.warning("consolidation reply had no bullets (attempt %d)", attempt + 1)
        raise LlmBadResponseError("the model's MEMORY.md rewrite had no '- ' bullets, twice")


def _context_of(paths: OwnerPaths) -> RuntimeContext:
    """The owner ``paths`` name, as a context (a caller that gave none: no tombstone check)."""
    scope = check_scope(paths.scope)
    return RuntimeContext(paths.tenant_id, paths.user_id, agent_id=paths.agent_id, scope=scope)


__all__ = [
    "ConsolidationResult",
    "Consolidator",
    "DEFAULT_CONSOLIDATION_PROMPT",
    "deterministic_memory",
    "lost_facts",
    "with_sources",
]
