"""Near-duplicates merged when they are recorded: the rule every backend applies the same way.

The designs' rule (docs/decisions.md): a memory whose cosine to an existing one is above 0.9
is a duplicate, and the existing memory is updated (the higher confidence, updated now,
accessed once more) instead of a second copy being stored. Two things keep a merge from losing or
bending what someone said:

- the merged text is kept with the fact it merged into, as one of its ``phrasings`` (with its
  source and time), and the lexical leg indexes it there (``Fact.indexed_text``);
- a text that changes a value is never merged, however close its vector: MiniLM puts
  "User has 2 dogs" / "User has 3 dogs" at 0.958, "Meeting is on Monday" / "... Tuesday" at
  0.933 and "User eats meat" / "User never eats meat" at 0.906, above the document's 0.9,
  while true rewordings ("likes" / "loves hiking", "went to" / "attended" a group) sit at
  0.95-0.98 (``benchmarks/lab/near_duplicates.py``; RESULTS.md, "Near-duplicates at
  write"). So the two texts must hold the same *value words*: numbers (digits and number
  words), dates and times (months, weekdays, relative days), negations (and words negated
  by a prefix: "likes" / "dislikes") and names (capitalised words: people, places), in the
  same order (a swap gives them other roles: "Alice owes Bob" / "Bob owes Alice", 0.992;
  a true rewording that reorders them is kept as a second fact); and
  neither may replace a thing or place the other names after a determiner or preposition
  ("forgot the umbrella at the town hall" / "... at a bakery", 0.916 on the synthetic set's
  decoys; adding one, "painted a picture of a sunrise", is a rewording).

Keys decide by themselves: a fact with a key is never merged (the same key supersedes, a
different key is a different thing), nor one of another kind, another expiry, or an inactive
one. A fact that already holds ``MAX_PHRASINGS`` takes no more: the next near-duplicate is a
fact of its own (maintenance's SimHash pass may still join them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from memory_service.domain.facts import Fact, Phrasing, Source
from memory_service.domain.limits import MAX_PHRASINGS, MAX_TAGS

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*|\d+(?:[.,:/]\d+)*", re.UNICODE)


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_NUMBER_WORDS = _word_set(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
    "eighty ninety hundred thousand million billion dozen half once twice thrice first second "
    "third fourth fifth sixth seventh eighth ninth tenth single double triple both couple "
    "several few many none"
)
_TIME_WORDS = _word_set(
    "january february march april june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday weekend weekends weekday "
    "weekdays today tomorrow yesterday tonight morning mornings afternoon afternoons evening "
    "evenings night nights noon midnight spring summer autumn fall winter ago last next "
    "previous before after earlier later early late daily weekly monthly yearly annually "
    "always usually often sometimes rarely seldom occasionally never"
)
_NEGATIONS = _word_set(
    "not no never nor neither none nobody nothing nowhere without cannot cant dont doesnt "
    "didnt isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent hadnt "
    "anymore longer stopped quit quitting"
)
# sentence openers that are capitalised without naming anyone
_OPENERS = _word_set(
    "the a an user users he she they i we you it its this that these those his her their my "
    "our your there here"
)
_NEGATING_PREFIXES = ("dis", "un", "non", "in", "im", "ir", "il")
# determiners and prepositions: the word after them (past any more of them) heads what they
# introduce, a thing or a place ("at the town hall", "at a bakery")
_INTRODUCERS = _word_set(
    "the a an this that these those my your his her its our their some any every each at in "
    "on to from into onto near by with for of about under over behind inside outside across "
    "around through"
)


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


_NEGATED = "not"  # every negation reads as one: "never" too says it does not


def _values_in_order(text: str) -> list[str]:
    """``value_words`` in the order ``text`` first says each."""
    out: dict[str, None] = {}
    for word in _words(text):
        low = word.lower().replace("’", "'")
        if low[0].isdigit() or low in _NUMBER_WORDS or low in _TIME_WORDS:
            out[low] = None
        elif low.endswith("n't") or low.replace("'", "") in _NEGATIONS:
            out[_NEGATED] = None
        elif word[0].isupper() and low not in _OPENERS:
            out[low] = None
    return list(out)


def value_words(text: str) -> frozenset[str]:
    """The words of ``text`` that carry a value a rewording must keep: numbers, dates and
    times, negations and names, lower-cased (``n't`` endings as their negation)."""
    return frozenset(_values_in_order(text))


def _roles(values: list[str]) -> list[str]:
    """A text's value words (``_values_in_order``) but the negation: their order says who
    does what to whom, from where to where ("Alice owes Bob 20 dollars" / "Bob owes Alice
    ...", 0.992; "moved from Paris to Lyon" / "from Lyon to Paris", 0.999). Where a negation
    stands moves with the wording."""
    return [w for w in values if w != _NEGATED]


def introduced_words(text: str) -> frozenset[str]:
    """The words that determiners and prepositions introduce in ``text``, lower-cased: the
    things and places it is about ("forgot the umbrella at the town hall": umbrella, town)."""
    words = [w.lower() for w in _words(text)]
    out = set()
    for i, word in enumerate(words):
        if word in _INTRODUCERS:
            head = next((w for w in words[i + 1 :] if w not in _INTRODUCERS), None)
            if head is not None:
                out.add(head)
    return frozenset(out)


def _negated_by_prefix(a: set[str], b: set[str]) -> bool:
    """Whether a word of one is a word of the other with a negating prefix ("likes" /
    "dislikes", "happy" / "unhappy")."""
    for word in a:
        for other in b:
            longer, shorter = (word, other) if len(word) > len(other) else (other, word)
            if any(longer == p + shorter for p in _NEGATING_PREFIXES) and len(shorter) > 2:
                return True
    return False


def changes_a_value(old: str, new: str) -> bool:
    """Whether ``new`` says something other than ``old`` however close their wording: a
    different number, date, time, name or negation, the same ones in another order (their
    roles swapped), or another thing or place introduced by a determiner or preposition
    (see the module's docstring)."""
    old_values, new_values = _values_in_order(old), _values_in_order(new)
    if set(old_values) != set(new_values):
        return True
    if _roles(old_values) != _roles(new_values):
        return True
    a = {w.lower() for w in _words(old)}
    b = {w.lower() for w in _words(new)}
    if introduced_words(old) - b and introduced_words(new) - a:
        return True  # each names a thing the other does not: one replaced the other
    return _negated_by_prefix(a - b, b - a)


@dataclass(frozen=True, slots=True)
class NearDuplicatePolicy:
    """When a recorded fact is merged into a stored one: ``enabled``, and the dense cosine
    it must reach (``cosine``; 0.9: docs/decisions.md)."""

    enabled: bool = True
    cosine: float = 0.9
    depth: int = 3  # nearest stored facts looked at: the guard may refuse the first

    def may_merge(self, stored: Fact, incoming: Fact, now: datetime) -> bool:
        """Whether ``incoming`` may merge into ``stored`` (their cosine aside)."""
        return (
            stored.id != incoming.id
            and stored.key is None
            and incoming.key is None
            and stored.kind == incoming.kind
            and stored.expires_at == incoming.expires_at
            and stored.is_active(now)
            and incoming.is_active(now)
            and len(phrasings_after(stored, incoming)) <= MAX_PHRASINGS
            and not changes_a_value(stored.text, incoming.text)
        )

    def may_take(self, incoming: Fact, now: datetime) -> bool:
        """Whether ``incoming`` can be merged into anything at all (worth a search)."""
        return self.enabled and incoming.key is None and incoming.is_active(now)


OFF = NearDuplicatePolicy(enabled=False)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` with each row at unit length (the embedder's already are), so a product
    of two is their cosines; a zero row stays zero."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def as_phrasing(fact: Fact) -> Phrasing:
    """``fact``'s text as another fact keeps it: with its source (or session) and time."""
    source = fact.source
    if source is None and fact.session_id is not None:
        source = Source(session_id=fact.session_id)
    return Phrasing(fact.text, source, fact.created_at)


def phrasings_after(stored: Fact, other: Fact) -> tuple[Phrasing, ...]:
    """``stored``'s phrasings once ``other`` joins it: ``other``'s text and its own phrasings
    added, each text once and none that is ``stored``'s own text. A merge that would leave
    more than ``MAX_PHRASINGS`` is not made."""
    out = list(stored.phrasings)
    texts = {stored.text, *(p.text for p in out)}
    for phrasing in (as_phrasing(other), *other.phrasings):
        if phrasing.text not in texts:
            texts.add(phrasing.text)
            out.append(phrasing)
    return tuple(out)


def merged(stored: Fact, incoming: Fact) -> Fact:
    """``stored`` with ``incoming`` merged into it: its text kept as a phrasing (with its
    source and time, once per text; its own phrasings too), the higher confidence and
    importance, and both facts' tags. Its own text, key, source, creation and update time
    stay (the record confirms it: ``recording.confirmed``)."""
    return replace(
        stored,
        phrasings=phrasings_after(stored, incoming),
        confidence=max(float(stored.confidence), float(incoming.confidence)),
        importance=max(stored.importance, incoming.importance),
        tags=tuple(dict.fromkeys((*stored.tags, *incoming.tags)))[:MAX_TAGS],
    )
