"""A seeded synthetic time benchmark: users whose city, job and diet change over time.

Each user gets three attributes, each with three or four values recorded weeks apart (the
later ones worded as changes: "moved to", "switched to"). Per user, some attributes are
recorded with a ``key`` (``user.city``: a later fact supersedes the earlier one, as the
flush and ``record --key`` do) and the others without one (all values stay open, as a flush
that did not name a key leaves them); a few unrelated facts sit beside them.

Questions:
- ``latest-keyed`` / ``latest-unkeyed``: asked now, the newest value is the answer;
- ``as-of``: asked about a moment between two changes of a keyed attribute, with
  ``as_of`` and the attribute's key as the filter: the value valid then is the answer (exact
  by construction: one fact of that key is valid at any moment).

Times are laid out backwards from the day the benchmark runs (``anchor``), so "now" is now
for the service's clock and the recency preference; the layout relative to it is the same
for one seed on any day.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memory_service.domain.facts import Fact
from memory_service.evaluation.datasets.synthetic_bank import DISTRACTORS, FILL, NAMES

DEFAULT_USERS = 20
DEFAULT_DISTRACTORS = 12
CATEGORIES: tuple[str, ...] = ("latest-keyed", "latest-unkeyed", "as-of")


@dataclass(frozen=True, slots=True)
class Attribute:
    name: str
    first: str  # the first value's wording
    changes: tuple[str, ...]  # a later value's wordings
    now: str  # the question asked now
    then: str  # the question asked about a past moment
    values: tuple[str, ...]


ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute(
        "city",
        "{n} lives in {v}",
        ("{n} moved to {v}", "{n} relocated to {v} for good", "{n} has a new flat in {v}"),
        "Where does {n} live now?",
        "Where did {n} live?",
        ("Paris", "Berlin", "Lisbon", "Oslo", "Madrid", "Vienna", "Prague", "Dublin", "Warsaw"),
    ),
    Attribute(
        "job",
        "{n} works as a {v}",
        ("{n} started a new job as a {v}", "{n} retrained as a {v}"),
        "What is {n}'s job these days?",
        "What was {n}'s job?",
        ("nurse", "teacher", "architect", "accountant", "chef", "pilot", "lawyer", "plumber"),
    ),
    Attribute(
        "diet",
        "{n} eats a {v} diet",
        ("{n} switched to a {v} diet", "{n} follows a {v} diet since last month"),
        "What diet does {n} follow now?",
        "What diet did {n} follow?",
        ("vegetarian", "vegan", "keto", "paleo", "pescatarian", "gluten-free", "low-carb"),
    ),
)


@dataclass(frozen=True, slots=True)
class TimedItem:
    ref: str
    fact: Fact


@dataclass(frozen=True, slots=True)
class TimeQuestion:
    qid: str
    text: str
    gold: str  # the ref of the one right fact
    category: str
    as_of: datetime | None = None
    key: str | None = None
    stale: tuple[str, ...] = ()  # the attribute's other values: wrong for this moment


@dataclass(slots=True)
class TimeUser:
    user_id: str
    items: list[TimedItem] = field(default_factory=list)
    questions: list[TimeQuestion] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TimeDataset:
    users: list[TimeUser]
    anchor: datetime

    @property
    def question_count(self) -> int:
        return sum(len(u.questions) for u in self.users)


def _user(index: int, seed: int, anchor: datetime, distractors: int) -> TimeUser:
    rng = random.Random(f"memory-bench-time:{seed}:{index}")
    name = NAMES[index % len(NAMES)]
    user = TimeUser(f"time-{index + 1:04d}")
    keyed = set(rng.sample([a.name for a in ATTRIBUTES], rng.choice((1, 2))))

    def add(text: str, when: datetime, *, key: str | None = None) -> str:
        ref = f"{user.user_id}:f{len(user.items) + 1}"
        fact = Fact(text, key=key, created_at=when)
        user.items.append(TimedItem(ref, fact))
        return ref

    def ask(text: str, gold: str, category: str, **extra: object) -> None:
        qid = f"{user.user_id}:q{len(user.questions) + 1}"
        user.questions.append(TimeQuestion(qid, text, gold, category, **extra))  # type: ignore[arg-type]

    for attribute in ATTRIBUTES:
        count = rng.choice((3, 4))
        values = rng.sample(attribute.values, count)
        # days before the anchor: the newest value 3-60 days old, each older one 30-150 before
        days = [rng.randint(3, 60)]
        while len(days) < count:
            days.append(days[-1] + rng.randint(30, 150))
        days.reverse()
        key = f"user.{attribute.name}" if attribute.name in keyed else None
        timeline: list[tuple[str, datetime]] = []
        for number, (value, days_ago) in enumerate(zip(values, days, strict=True)):
            when = anchor - timedelta(days=days_ago, minutes=rng.randint(0, 600))
            wording = attribute.first if number == 0 else rng.choice(attribute.changes)
            timeline.append((add(wording.format(n=name, v=value), when, key=key), when))
        category = "latest-keyed" if key else "latest-unkeyed"
        refs = [ref for ref, _ in timeline]
        ask(attribute.now.format(n=name), refs[-1], category, stale=tuple(refs[:-1]))
        if key is None:
            continue
        for (ref, start), (_, end) in zip(timeline, timeline[1:], strict=False):
            moment = start + (end - start) * rng.uniform(0.2, 0.8)
            others = tuple(r for r in refs if r != ref)
            ask(attribute.then.format(n=name), ref, "as-of", as_of=moment, key=key, stale=others)
    texts = {i.fact.text for i in user.items}
    for _ in range(distractors):
        template = rng.choice(DISTRACTORS)
        fields = {k: rng.choice(v) for k, v in FILL.items() if "{" + k in template}
        text = template.format(n=name, **fields)
        if text not in texts:
            texts.add(text)
            add(text, anchor - timedelta(days=rng.randint(1, 400)))
    user.items.sort(key=lambda i: i.fact.created_at or anchor)
    return user


def generate(
    users: int = DEFAULT_USERS,
    *,
    seed: int = 7,
    distractors: int = DEFAULT_DISTRACTORS,
    anchor: datetime | None = None,
) -> TimeDataset:
    """``users`` synthetic users with changing facts, laid out before ``anchor`` (default:
    the start of today, UTC). Deterministic for a seed, relative to the anchor."""
    now = datetime.now(UTC)
    start = anchor or now.replace(hour=0, minute=0, second=0, microsecond=0)
    return TimeDataset([_user(i, seed, start, distractors) for i in range(users)], start)
