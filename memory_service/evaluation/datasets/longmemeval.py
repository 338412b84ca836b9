"""LongMemEval (Wu et al., ICLR 2025) under its paper's retrieval protocol.

One memory per question, built from that question's haystack; only user turns are memories
(the paper's best key). Units:
- ``turns``: gold = the user turns marked ``has_answer`` in the answer sessions;
- ``sessions``: gold = the answer sessions holding such a turn; a retrieved turn counts for its
  session. (The paper can also index whole sessions; a fact here is at most 8 KiB, so sessions
  are reached through their turns.)
Abstention questions (``question_id`` ending in ``_abs``) have no evidence and are skipped, as
are questions whose evidence sits only in assistant turns. Metrics: recall_any / recall_all /
nDCG at k. Provenance (``with_source``): each memory's ``source`` names its session and turn
position, without text (the memory *is* the message; indexing it twice would only double it).
"""

from __future__ import annotations

from collections import Counter

from memory_service.domain.context import ID_PATTERN
from memory_service.domain.facts import Source
from memory_service.evaluation.dataset import (
    BenchInputError,
    Conversation,
    Dataset,
    MemoryItem,
    Question,
    fit_text,
)

UNITS: tuple[str, ...] = ("turns", "sessions")
CATEGORIES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
_REQUIRED = ("question_id", "question", "haystack_session_ids", "haystack_sessions")


def turn_id(session_id: str, index: int) -> str:
    """The paper's corpus id for a turn: session id and 1-based position in the session."""
    return f"{session_id}_{index + 1}"


def _source(session_id: str, index: int) -> Source:
    """The turn's provenance: its session (when the id is one this service accepts) and its
    position in it."""
    usable = ID_PATTERN.fullmatch(session_id) and ".." not in session_id
    return Source("longmemeval", session_id if usable else None, (index,))


def _entry(
    entry: dict, unit: str, skipped: Counter[str], notes: Counter[str], with_source: bool = True
) -> Conversation | None:
    missing = [name for name in _REQUIRED if name not in entry]
    if missing:
        raise BenchInputError(f"LongMemEval entry without {', '.join(missing)}")
    qid = str(entry["question_id"])
    if qid.endswith("_abs"):
        skipped["abstention (no evidence)"] += 1
        return None
    answer_sessions = {str(s) for s in entry.get("answer_session_ids") or []}
    items: list[MemoryItem] = []
    gold: set[str] = set()
    sessions = zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=True)
    for session_id, turns in sessions:
        session_id = str(session_id)
        for index, turn in enumerate(turns or []):
            if turn.get("role") != "user":
                continue
            text, cut = fit_text(str(turn.get("content") or "").strip())
            if not text:
                notes["empty user turns"] += 1
                continue
            if cut:
                notes["texts truncated to 8 KiB"] += 1
            ref = turn_id(session_id, index) if unit == "turns" else session_id
            source = _source(session_id, index) if with_source else None
            items.append(MemoryItem(text, (ref,), source=source))
            if session_id in answer_sessions and turn.get("has_answer"):
                gold.add(ref)
    if not gold:
        skipped["evidence not in any user turn"] += 1
        return None
    category = str(entry.get("question_type") or "all")
    question = Question(qid, str(entry["question"]), frozenset(gold), category)
    return Conversation(qid, items, [question])


def load_longmemeval(data: object, *, unit: str = "turns", with_source: bool = True) -> Dataset:
    """LongMemEval's JSON (a list of question entries) as a ``Dataset``."""
    if unit not in UNITS:
        raise BenchInputError(f"--unit for longmemeval is one of {', '.join(UNITS)}, not {unit!r}")
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise BenchInputError("a LongMemEval file is a JSON list of question entries")
    skipped: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    conversations = []
    for entry in data:
        try:
            conversation = _entry(entry, unit, skipped, notes, with_source)
        except ValueError as exc:  # zip(strict=True): ids and sessions of different lengths
            raise BenchInputError(f"LongMemEval entry {entry.get('question_id')!r}: {exc}") from exc
        if conversation is not None:
            conversations.append(conversation)
    seen = {q.category for c in conversations for q in c.questions}
    categories = tuple(c for c in CATEGORIES if c in seen) + tuple(sorted(seen - set(CATEGORIES)))
    return Dataset("longmemeval", unit, conversations, categories, skipped, notes)
