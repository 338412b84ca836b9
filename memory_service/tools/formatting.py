"""What the memory tools hand back to the model: one line per fact or recall, and the outcome
of one call."""

from __future__ import annotations

from dataclasses import dataclass

from memory_service.domain.facts import Fact, Recall
from memory_service.pipeline.memory_md import plain_memory


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call returned to the model; ``ok`` is False for a refused call."""

    call_id: str
    name: str
    text: str
    ok: bool = True
    error_code: str | None = None


def plain_line(line: str) -> str:
    """A MEMORY.md line as the model reads it (no Markdown bullet, no metadata comment)."""
    return plain_memory(line).strip()


def format_fact(fact: Fact, max_chars: int | None = None) -> str:
    """One fact as the list view (its text cut to ``max_chars``) and memory_recall show it."""
    tags = "|".join(p for p in (fact.kind, str(fact.importance), fact.key) if p)
    day = f", {fact.created_at:%Y-%m-%d}" if fact.created_at else ""
    return f"- [{tags}] {summary(fact.text, max_chars)} (id={fact.id}{day}{_unverified(fact)})"


def _unverified(fact: Fact) -> str:
    """The mark of a fact whose decayed confidence is below the threshold: the model should
    ask the user before relying on it (saving it again confirms it)."""
    return ", needs verification" if fact.needs_verification else ""


def summary(text: str, max_chars: int | None) -> str:
    """``text`` cut to ``max_chars`` at a word where one is near, marked with an ellipsis."""
    if max_chars is None or len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    space = cut.rfind(" ")
    if space >= max_chars // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def format_recall(recall: Recall) -> str:
    legs = ", ".join(f"{leg} #{rank}" for leg, rank in recall.ranks.items() if rank is not None)
    fact = recall.fact
    shared = f", {fact.scope} memory" if fact.scope not in (None, "user") else ""
    unverified = _unverified(fact)
    if unverified:
        unverified += f", confidence={recall.confidence:.2f}"
    return (
        f"Recall: {fact.text} (id={fact.id}, score={recall.score:.4f}, {legs}{shared}{unverified})"
    )
