"""The one shape every benchmark dataset is loaded into.

A ``Conversation`` is one memory (one user): the items to record and the questions to ask.
Gold evidence is matched through ``refs`` (dia_ids, turn ids, session ids), never through text:
two memories can have the same text, and recording merges them into one fact.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from memory_service.domain.errors import MemoryServiceError
from memory_service.domain.facts import Fact, Source
from memory_service.domain.limits import MAX_FACT_TEXT_BYTES


class BenchInputError(MemoryServiceError):
    """A benchmark option or input file the run cannot use (printed as one line by the CLI)."""

    code = "invalid_bench_input"


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One memory to record, and the evidence ids it carries."""

    text: str
    refs: tuple[str, ...] = ()
    key: str | None = None
    kind: str = "fact"
    created_at: datetime | None = None
    session_id: str | None = None  # the conversation session it was said in, as a client records
    source: Source | None = None  # where it came from, where the data says (provenance)

    def to_fact(self) -> Fact:
        return Fact(
            self.text,
            key=self.key,
            kind=self.kind,
            created_at=self.created_at,
            session_id=self.session_id,
            source=self.source,
        )


@dataclass(frozen=True, slots=True)
class Question:
    """A query with its gold refs; ``stale`` refs are outdated memories that must not come back."""

    qid: str
    text: str
    gold: frozenset[str]
    category: str = "all"
    stale: frozenset[str] = frozenset()


@dataclass(slots=True)
class Conversation:
    """One memory: everything in it belongs to one user, recorded into a fresh backend.
    ``probes``: questions about nothing in it (no gold), asked only by the false-injection
    sweep, per category (e.g. the language they are asked in)."""

    id: str
    items: list[MemoryItem]
    questions: list[Question]
    probes: list[Question] = field(default_factory=list)

    @property
    def user_id(self) -> str:
        return safe_user_id(self.id)


@dataclass(slots=True)
class Dataset:
    """A loaded benchmark. ``skipped`` counts questions left out, by reason; ``notes`` counts
    anything else worth reporting (dropped evidence ids, truncated texts)."""

    name: str
    unit: str
    conversations: list[Conversation]
    categories: tuple[str, ...] = ()
    skipped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)

    def limited(self, limit: int | None) -> Dataset:
        """The first ``limit`` conversations (all when ``None``); counts stay as loaded."""
        if limit is None:
            return self
        if limit < 1:
            raise BenchInputError("--limit-conversations must be at least 1")
        return Dataset(
            self.name,
            self.unit,
            self.conversations[:limit],
            self.categories,
            self.skipped,
            self.notes,
        )

    @property
    def question_count(self) -> int:
        return sum(len(c.questions) for c in self.conversations)

    @property
    def item_count(self) -> int:
        return sum(len(c.items) for c in self.conversations)


_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]+")


def safe_user_id(raw: str) -> str:
    """A dataset id as a valid ``RuntimeContext`` user id (same id in, same id out)."""
    cleaned = _UNSAFE.sub("-", raw).replace("..", "-").strip("-.") or "user"
    if not cleaned[0].isalnum():
        cleaned = "u" + cleaned
    return cleaned[:128]


def fit_text(text: str, limit: int = MAX_FACT_TEXT_BYTES) -> tuple[str, bool]:
    """``text`` cut to ``limit`` UTF-8 bytes at a character boundary; True when it was cut.

    A fact is at most 8 KiB; some public datasets hold longer turns (pasted documents)."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode("utf-8", errors="ignore").rstrip(), True
