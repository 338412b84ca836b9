"""A seeded synthetic memory benchmark that ships with the project (no download, no licence).

Each user gets facts of every kind (fact, preference, event, procedure) from a bank of slots.
Each slot has a fact template and two question templates: ``keyword`` (shares rare words with
the fact, which BM25 likes) and ``paraphrase`` (asks the same thing in other words, which dense
retrieval likes). On top of that:
- ``update``: an older fact with the same ``key`` is recorded first; the newer one must win and
  the older one must never come back (it is the question's ``stale`` ref);
- ``multi-fact``: two facts answer one question;
- ``identifier``: eight bookings alike but for an opaque code, asked by the code (BM25's case);
- ``cjk``: Chinese and Japanese facts asked in the same language;
- near misses: the same slot's fact about a friend (shares words and meaning; only the
  subject differs), and distractors: other people and things sharing words with the questions.
The same seed always gives the same dataset. The word banks are ``synthetic_bank``'s; this
module draws from them.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from memory_service.evaluation.dataset import Conversation, Dataset, MemoryItem, Question
from memory_service.evaluation.datasets.synthetic_bank import (
    BOOKING_FACT,
    BOOKING_QUESTION,
    BOOKINGS,
    CJK_SLOTS,
    DESTINATIONS,
    DISTRACTORS,
    FILL,
    NAMES,
    OTHER_SUBJECT,
    PET_FACT,
    PET_QUESTIONS,
    PETS,
    SLOTS,
    Slot,
)

DEFAULT_USERS = 20
DEFAULT_DISTRACTORS = 30
NEAR_MISS_SHARE = 0.5  # chance that a slot also gets the same fact about someone else
CATEGORIES: tuple[str, ...] = (
    "keyword",
    "paraphrase",
    "update",
    "multi-fact",
    "identifier",
    "cjk",
)
_BASE_TIME = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


def _near_miss(slot: Slot, value: dict[str, str], name: str, rng: random.Random) -> str:
    """The slot's fact about someone else with another value: shares the words and the
    meaning of the user's fact, only the subject tells them apart."""
    others = [v for v in slot.values if v != value] or list(slot.values)
    subject = OTHER_SUBJECT[slot.lang].format(n=name, p=rng.choice(FILL["p"]))
    return slot.fact.format(n=subject, **rng.choice(others))


def _fill(template: str, rng: random.Random, **known: str) -> str:
    fields = {name: rng.choice(pool) for name, pool in FILL.items() if "{" + name in template}
    return template.format(**fields, **known)


class _UserBuilder:
    """Collects one user's items and questions, numbering refs in order."""

    def __init__(self, user: str, name: str, rng: random.Random) -> None:
        self.user = user
        self.name = name
        self.rng = rng
        self.items: list[MemoryItem] = []
        self.questions: list[Question] = []

    def add(self, text: str, *, kind: str, key: str | None = None, day: int) -> str:
        ref = f"{self.user}:f{len(self.items) + 1}"
        when = _BASE_TIME + timedelta(days=day, minutes=len(self.items))
        self.items.append(MemoryItem(text, (ref,), key=key, kind=kind, created_at=when))
        return ref

    def ask(
        self, text: str, gold: set[str], category: str, stale: frozenset[str] = frozenset()
    ) -> None:
        qid = f"{self.user}:q{len(self.questions) + 1}"
        self.questions.append(Question(qid, text, frozenset(gold), category, frozenset(stale)))

    def near_miss(self, slot: Slot, value: dict[str, str]) -> None:
        if self.rng.random() < NEAR_MISS_SHARE:
            text = _near_miss(slot, value, self.name, self.rng)
            self.add(text, kind=slot.kind, day=self.rng.randint(0, 250))


def _slots(b: _UserBuilder) -> None:
    """Nine slot facts, each asked by keyword or paraphrase; two of them updated."""
    rng, name = b.rng, b.name
    chosen = rng.sample(SLOTS, 9)
    updatable = [s for s in chosen if s.update_fact]
    updated = {s.name for s in rng.sample(updatable, min(2, len(updatable)))}
    for slot in chosen:
        value = rng.choice(slot.values)
        key = f"user.{slot.name}"
        style = rng.choice(("keyword", "paraphrase"))
        question = (slot.keyword if style == "keyword" else slot.paraphrase).format(n=name, **value)
        b.near_miss(slot, value)
        if slot.name in updated and slot.update_fact:
            old_value = rng.choice([v for v in slot.values if v != value])
            old = b.add(slot.fact.format(n=name, **old_value), kind=slot.kind, key=key, day=10)
            new = b.add(slot.update_fact.format(n=name, **value), kind=slot.kind, key=key, day=200)
            b.ask(question, {new}, "update", frozenset({old}))
        else:
            ref = b.add(slot.fact.format(n=name, **value), kind=slot.kind, key=key, day=50)
            b.ask(question, {ref}, style)


def _pets(b: _UserBuilder) -> None:
    """Two pets, one question that needs both."""
    refs = {
        b.add(PET_FACT.format(n=b.name, y=b.rng.randint(2015, 2023), **pet), kind="event", day=60)
        for pet in b.rng.sample(PETS, 2)
    }
    b.ask(b.rng.choice(PET_QUESTIONS).format(n=b.name), refs, "multi-fact")


def _bookings(b: _UserBuilder) -> None:
    """Near-identical facts told apart only by an opaque code; asked by the code."""
    codes: set[str] = set()
    while len(codes) < BOOKINGS:
        codes.add("".join(b.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6)))
    bookings = [
        (b.add(BOOKING_FACT.format(n=b.name, a=dest, code=code), kind="event", day=80), code)
        for dest, code in zip(b.rng.sample(DESTINATIONS, BOOKINGS), sorted(codes), strict=True)
    ]
    ref, code = b.rng.choice(bookings)
    b.ask(BOOKING_QUESTION.format(code=code), {ref}, "identifier")


def _cjk(b: _UserBuilder) -> None:
    for slot in b.rng.sample(CJK_SLOTS, 2):
        value = b.rng.choice(slot.values)
        key = f"user.{slot.name}"
        ref = b.add(slot.fact.format(n=b.name, **value), kind=slot.kind, key=key, day=70)
        b.near_miss(slot, value)
        b.ask(b.rng.choice((slot.keyword, slot.paraphrase)).format(n=b.name), {ref}, "cjk")


def _distractors(b: _UserBuilder, count: int) -> None:
    texts = {item.text for item in b.items}
    for _ in range(count):
        text = _fill(b.rng.choice(DISTRACTORS), b.rng, n=b.name)
        if text not in texts:
            texts.add(text)
            b.add(text, kind="fact", day=b.rng.randint(0, 250))


def _user(index: int, seed: int, distractors: int) -> Conversation:
    rng = random.Random(f"memory-bench:{seed}:{index}")
    b = _UserBuilder(f"synthetic-{index + 1:04d}", NAMES[index % len(NAMES)], rng)
    _slots(b)
    _pets(b)
    _bookings(b)
    _cjk(b)
    _distractors(b, distractors)
    items = sorted(b.items, key=lambda item: item.created_at or _BASE_TIME)
    return Conversation(b.user, items, b.questions)


def generate(
    users: int = DEFAULT_USERS, *, seed: int = 7, distractors: int = DEFAULT_DISTRACTORS
) -> Dataset:
    """``users`` synthetic users; each is one memory. Deterministic for a given seed."""
    conversations = [_user(i, seed, distractors) for i in range(users)]
    return Dataset("synthetic", "facts", conversations, CATEGORIES, Counter(), Counter())


def scale_texts(index: int, count: int, *, seed: int = 7) -> tuple[list[str], list[str]]:
    """``count`` distinct fact texts for user ``index`` and a few questions about them, for
    the scale run: slot facts and fillers, with dates to keep every text distinct."""
    rng = random.Random(f"memory-scale:{seed}:{index}")
    name = NAMES[index % len(NAMES)]
    facts: dict[str, None] = {}
    questions: list[str] = []
    for slot in rng.sample(SLOTS, min(len(SLOTS), count)):
        value = rng.choice(slot.values)
        facts[slot.fact.format(n=name, **value)] = None
        questions.append(rng.choice((slot.keyword, slot.paraphrase)).format(n=name, **value))
    day = 0
    while len(facts) < count:
        day += 1
        date = (_BASE_TIME + timedelta(days=day)).strftime("%d %B %Y")
        facts[f"On {date}, " + _fill(rng.choice(DISTRACTORS), rng, n=name)] = None
    return list(facts)[:count], questions
