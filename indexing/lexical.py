"""What the lexical leg indexes for one memory: its words, and optionally the day it was made.

People ask about time in words ("what did she paint on October 13, 2023?", "in May 2023"), but
a memory's text rarely says its own date: ``created_at`` does. Adding the date's day, month name
and year as extra terms lets such a question match, and costs a query without dates nothing
(the terms are absent from it). Both backends build their BM25 documents here, so they index
the same terms. On LoCoMo it lifts the fused result's recall (``benchmarks/RESULTS.md``,
"Fusion and neighbours").
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

from indexing.tokenize import tokenize

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def date_words(when: datetime) -> str:
    """``"8 May 2023"``: the (UTC) day of ``when`` in words, locale-independent."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return f"{when.day} {_MONTHS[when.month - 1]} {when.year}"


DATE_TERMS = 3  # "8 May 2023": day, month, year


def average_length(base: float, *, with_date: bool) -> float:
    """A fixed average document length (Qdrant's BM25 vectors) with the date terms counted:
    every document gets ``DATE_TERMS`` more terms, so the length norm stays calibrated."""
    return base + DATE_TERMS if with_date else base


def lexical_terms(
    text: str, created_at: datetime | None = None, *, with_date: bool = False
) -> list[str]:
    """Terms of ``text``, then (``with_date`` and a known ``created_at``) those of its date."""
    terms = tokenize(text)
    if with_date and created_at is not None:
        terms += _day_terms(date_words(created_at))
    return terms


@lru_cache(maxsize=4096)
def _day_terms(day: str) -> tuple[str, ...]:
    """A day's terms: the same few days recur across a user's facts."""
    return tuple(tokenize(day))
