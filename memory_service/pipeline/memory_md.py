"""MEMORY.md as the models read it: its bullets as facts, its plain text, cut to a budget.

MEMORY.md is written by consolidation (bullets with a metadata comment each, so the files
backend reads it back as facts) and may be edited by hand. Every prompt that carries it (the
flush, the harness's system prompt, consolidation's rewrite, the memory tools) reads it through
here, so a model always sees the same text: no metadata comments, cut at a line boundary.
"""

from __future__ import annotations

import re

from indexing.hashing import content_hash
from memory_service.domain.facts import Fact
from memory_service.domain.messages import estimate_tokens
from memory_service.longterm.files.fact_files import parse_fact_file

_METADATA = re.compile(r"\s*<!--\s*memory\s+\{.*?\}\s*-->")


def plain_memory(markdown: str) -> str:
    """MEMORY.md as a model should read it: metadata comments removed."""
    return _METADATA.sub("", markdown)


def memory_bullets(markdown: str) -> list[Fact]:
    """The facts MEMORY.md's bullets state (no ids or dates required)."""
    return [line.fact for line in parse_fact_file(markdown, default_created_at=None)]


def known_hashes(markdown: str) -> set[str]:
    """The exact-text hashes of MEMORY.md's bullets: what a flush must not record again."""
    return {content_hash(fact.text) for fact in memory_bullets(markdown)}


def cut_to_tokens(text: str, budget: int) -> str:
    """``text`` cut at a line boundary to about ``budget`` tokens."""
    if estimate_tokens(text) <= budget:
        return text
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        cost = estimate_tokens(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


def memory_md_for_model(markdown: str, budget: int) -> tuple[str, str]:
    """MEMORY.md (``MemoryDocs.read``) as a model reads it (no metadata comments): (what fits
    ``budget`` tokens, cut at a line boundary; the whole text). ``("", "")`` when empty."""
    whole = plain_memory(markdown).strip()
    return cut_to_tokens(whole, budget), whole
