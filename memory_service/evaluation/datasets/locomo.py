"""LoCoMo (Maharana et al., ACL 2024) as one memory per conversation.

Units: ``turns`` (each dialog turn is a memory, carrying its dia_id) or ``facts`` (each
``observation`` fact, carrying the dia_id(s) it was written from). A fact is recorded with its
provenance by default: ``source`` names the session and turn numbers of those dia_ids and holds
their text (as ``--turn-text`` renders a turn, cut to ``MAX_SOURCE_TEXT_BYTES``), what a flush
that cites its messages records; ``with_source=False`` (``bench --no-source``) leaves it out.
Evidence ids are normalised
("D8:6; D9:17" -> two ids, "D:11:26" -> "D11:26", "D30:05" -> "D30:5"); ids that resolve to no
turn of the conversation are dropped and counted, and a question left with none is skipped.
Category 5 (adversarial: no answer exists) is left out, as in the paper's recall figures.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from memory_service.domain.facts import Source, clip_source_text
from memory_service.evaluation.dataset import (
    BenchInputError,
    Conversation,
    Dataset,
    MemoryItem,
    Question,
    fit_text,
)

CATEGORIES: dict[int, str] = {
    1: "1 multi-hop",
    2: "2 temporal",
    3: "3 open-domain",
    4: "4 single-hop",
}
ADVERSARIAL = 5
UNITS: tuple[str, ...] = ("turns", "facts")
TURN_TEXTS: tuple[str, ...] = ("speaker", "plain", "speaker+caption")

_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")


def parse_evidence(raw: object) -> list[str]:
    """Every dia_id packed in one evidence entry, normalised to ``D<session>:<turn>``."""
    if not isinstance(raw, str):
        return []
    return [f"D{int(s)}:{int(t)}" for s, t in _DIA_ID.findall(raw)]


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def iter_sessions(conversation: dict) -> Iterator[tuple[int, list[dict]]]:
    """``(N, turns)`` of each ``session_N`` key holding a list, in session order."""
    sessions = []
    for key, value in conversation.items():
        match = _SESSION.fullmatch(key)
        if match and isinstance(value, list):
            sessions.append((int(match.group(1)), value))
    for number, turns in sorted(sessions, key=lambda s: s[0]):
        yield number, [t for t in turns if isinstance(t, dict)]


def iter_turns(conversation: dict) -> Iterator[dict]:
    """Turns in session order (``session_N`` keys holding lists; date keys are skipped)."""
    for _, turns in iter_sessions(conversation):
        yield from turns


def session_time(conversation: dict, number: int) -> datetime | None:
    """When session ``number`` started ("1:56 pm on 8 May, 2023"), as UTC; None if unreadable."""
    raw = conversation.get(f"session_{number}_date_time")
    try:
        return datetime.strptime(str(raw).strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def _stamp(start: datetime | None, position: int) -> datetime | None:
    """The n-th memory of a session, one second after the previous: the order a client that
    records each message as it happens would give them."""
    return start + timedelta(seconds=position) if start is not None else None


def turn_text(turn: dict, style: str) -> str:
    text = str(turn.get("text") or "").strip()
    caption = str(turn.get("blip_caption") or "").strip()
    if style == "speaker+caption" and caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    if not text and caption:  # an image-only turn: its caption is all there is
        text = f"[shares a photo: {caption}]"
    if style != "plain" and text:
        text = f"{turn.get('speaker', '?')}: {text}"
    return text


def _turn_items(sample: dict, style: str, notes: Counter[str]) -> list[MemoryItem]:
    items = []
    conversation = sample.get("conversation") or {}
    for number, turns in iter_sessions(conversation):
        start = session_time(conversation, number)
        for position, turn in enumerate(turns):
            ids = parse_evidence(turn.get("dia_id"))
            text, cut = fit_text(turn_text(turn, style))
            if not text or not ids:
                notes["turns without text or dia_id"] += 1
                continue
            if cut:
                notes["texts truncated to 8 KiB"] += 1
            when = _stamp(start, position)
            session_id = f"session_{number}"
            items.append(MemoryItem(text, tuple(ids[:1]), created_at=when, session_id=session_id))
    return items


def said_by_turn(conversation: dict, style: str) -> dict[str, str]:
    """Each turn's text (as ``turn_text`` renders it) by its normalised dia_id."""
    out = {}
    for turn in iter_turns(conversation):
        ids = parse_evidence(turn.get("dia_id"))
        if ids:
            out.setdefault(ids[0], turn_text(turn, style))
    return out


def source_of(refs: Sequence[str], said: dict[str, str]) -> Source | None:
    """The provenance of a fact written from the turns ``refs``: their session, their turn
    numbers in it, and their text (None when no ref has text)."""
    spoken = clip_source_text(" ".join(said[r] for r in refs if said.get(r)))
    if not refs or not spoken:
        return None
    first = _DIA_ID.match(refs[0])
    assert first is not None  # refs are normalised dia_ids
    session = first.group(1)
    numbers = [int(m.group(2)) for r in refs if (m := _DIA_ID.match(r)) and m.group(1) == session]
    return Source("locomo", f"session_{int(session)}", tuple(numbers), spoken)


def _fact_items(
    sample: dict, turn_ids: set[str], notes: Counter[str], said: dict[str, str] | None
) -> list[MemoryItem]:
    items = []
    conversation = sample.get("conversation") or {}
    observation = sample.get("observation") or {}
    ordered = sorted(
        observation.items(),
        key=lambda kv: int(m.group(1)) if (m := _SESSION.match(kv[0])) else 0,
    )
    for name, by_speaker in ordered:
        number = int(m.group(1)) if (m := _SESSION.match(name)) else None
        start = session_time(conversation, number) if number is not None else None
        session_id = f"session_{number}" if number is not None else None
        position = 0
        for facts in (by_speaker or {}).values():
            for entry in facts or []:
                if not isinstance(entry, list | tuple) or not entry:
                    notes["observations malformed"] += 1
                    continue
                text, cut = fit_text(str(entry[0]).strip())
                if not text:
                    notes["observations malformed"] += 1
                    continue
                refs = _resolve(_flatten_ids(entry[1:]), turn_ids)
                if not refs:
                    notes["observations linked to no turn"] += 1
                if cut:
                    notes["texts truncated to 8 KiB"] += 1
                when = _stamp(start, position)
                position += 1
                source = source_of(refs, said) if said is not None else None
                items.append(
                    MemoryItem(
                        text, tuple(refs), created_at=when, session_id=session_id, source=source
                    )
                )
    return items


def _flatten_ids(values: Iterable[object]) -> list[str]:
    out: list[str] = []
    for value in values:
        for raw in _as_list(value):
            out.extend(parse_evidence(raw))
    return out


def _resolve(ids: Iterable[str], turn_ids: set[str]) -> list[str]:
    return [i for i in dict.fromkeys(ids) if i in turn_ids]


def _questions(
    sample: dict, sample_id: str, turn_ids: set[str], skipped: Counter[str], notes: Counter[str]
) -> list[Question]:
    out = []
    for number, qa in enumerate(sample.get("qa") or [], start=1):
        category = qa.get("category")
        if category == ADVERSARIAL:
            skipped["category 5 (adversarial, no answer)"] += 1
            continue
        if category not in CATEGORIES:
            skipped["unknown category"] += 1
            continue
        entries = _as_list(qa.get("evidence"))
        if not entries:
            skipped["no evidence ids"] += 1
            continue
        ids: list[str] = []
        for raw in entries:
            parsed = parse_evidence(raw)
            if not parsed:
                notes["evidence entries unreadable (dropped)"] += 1
            ids.extend(parsed)
        gold = _resolve(ids, turn_ids)
        if unresolved := len(set(ids) - set(gold)):
            notes["evidence ids resolving to no turn (dropped)"] += unresolved
        if not gold:
            skipped["no evidence id resolves to a turn"] += 1
            continue
        question = str(qa.get("question") or "").strip()
        if not question:
            skipped["empty question"] += 1
            continue
        out.append(
            Question(f"{sample_id}:q{number}", question, frozenset(gold), CATEGORIES[category])
        )
    return out


def load_locomo(
    data: object, *, unit: str = "turns", turn_text: str = "speaker", with_source: bool = True
) -> Dataset:
    """LoCoMo's JSON (a list of samples) as a ``Dataset`` of the given unit (``facts`` with
    their source turns unless ``with_source`` is False)."""
    if unit not in UNITS:
        raise BenchInputError(f"--unit for locomo is one of {', '.join(UNITS)}, not {unit!r}")
    if turn_text not in TURN_TEXTS:
        raise BenchInputError(f"--turn-text is one of {', '.join(TURN_TEXTS)}")
    if not isinstance(data, list) or not all(isinstance(s, dict) for s in data):
        raise BenchInputError("a LoCoMo file is a JSON list of samples")
    skipped: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    conversations = []
    for index, sample in enumerate(data, start=1):
        sample_id = str(sample.get("sample_id") or f"sample-{index}")
        turns = list(iter_turns(sample.get("conversation") or {}))
        turn_ids = {i for t in turns for i in parse_evidence(t.get("dia_id"))[:1]}
        if unit == "turns":
            items = _turn_items(sample, turn_text, notes)
        else:
            conversation = sample.get("conversation") or {}
            said = said_by_turn(conversation, turn_text) if with_source else None
            items = _fact_items(sample, turn_ids, notes, said)
        questions = _questions(sample, sample_id, turn_ids, skipped, notes)
        conversations.append(Conversation(sample_id, items, questions))
    name = "locomo"
    return Dataset(name, unit, conversations, tuple(CATEGORIES.values()), skipped, notes)
