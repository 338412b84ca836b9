"""The journal of settled decisions: what maintenance and record decide about the facts of the
daily ledgers, written beside them, so that no ledger line is ever rewritten or removed by
them (only an explicit delete, forget or erase, or a person, removes one).

    memory/decisions/journal.md
    - 2026-06-30T12:00:00+00:00 expired 35f6c5d4-…: past its expires_at … <!-- settled {…} -->

One bullet per decision, appended durably (``fsutil.append_durably``) under the owner's write
lock: the time, the decision, the fact's id and why, in words, then what reading needs as JSON
in a trailing HTML comment (``at``, ``id``, ``hash``: the first ``OF_HASH_CHARS`` of its
content hash, as MEMORY.md's ``of`` names facts, ``decision`` and the decision's own fields).
Reading folds a fact's decisions in journal order (``fold``) and the index applies the result
to the fact as its ledger line reads (``settle``):

- ``superseded``: ``set`` holds its ``superseded_by`` and ``valid_to``;
- ``updated``: ``set`` holds the metadata fields that changed, in the ledger comment's form
  (``fact_files.fact_meta``; null: back to the default), as a merge or ``update`` left them;
- ``merged`` (into the near-duplicate ``into``) and ``expired``: the fact leaves every read,
  as if deleted (recall, list, get, export, consolidation);
- ``duplicate``: the same text stands on ``copies`` ledger lines; reading already keeps one;
- ``recorded``: the fact was recorded again (after it had been merged, expired or closed) in
  ledger ``in``: earlier decisions no longer apply, and it reads as its line there.

A line that does not parse (a write cut by a crash, a hand edit) is skipped. A ledger line
written before the journal existed keeps the decisions in its own comment
(``superseded_by``, ``valid_to``) and reads as it always did; a person may edit or delete a
journal line (saving it as a new file, as editors do, or changing its end), and then the
fact reads as its ledger line says.

Growth: a line is a few hundred bytes (two ids, a 16-digit hash, a sentence), and a fact gathers
few of them: at most one ``merged`` or ``expired`` and one ``superseded``, one ``updated`` per
merge or metadata change, one ``duplicate`` per new repeat of its line. So the journal grows by
about one line per fact that maintenance or a newer fact settles. Parsing it whole grows with it
(RESULTS.md, "Costs behind the code's choices"), but a read after an append parses only the
lines appended (``read_journal``), so it is read whole once per process.
Compaction may never drop a decision about a line that still exists, live or archived:
maintenance's settling drops only the decisions about facts that no fact file holds any more
(their lines deleted by hand), and an explicit delete drops the deleted facts' decisions with
them (an ``updated`` may hold the fact's source). Nothing else rewrites it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.files.fact_files import (
    OF_HASH_CHARS,
    dump_meta,
    escape_text,
    fact_from_meta,
    fact_meta,
    unescape_text,
)
from memory_service.stores.fsutil import append_durably, read_text, write_atomically

JOURNAL_HEADER = (
    "# Settled decisions\n\n"
    "What maintenance and record decided about the facts of the daily ledgers, which they\n"
    "never rewrite. Append-only: one line per decision, newest last.\n\n"
)
DECISIONS = ("superseded", "updated", "merged", "expired", "duplicate", "recorded")
HIDING = frozenset({"merged", "expired"})  # the fact leaves every read

_LINE = re.compile(r"^\s*[-*+]\s+(?P<words>.*?)\s*<!--\s*settled\s+(?P<json>\{.*\})\s*-->\s*$")
Stamp = tuple[int, int, int]  # mtime_ns, size, inode


@dataclass(frozen=True, slots=True)
class Decision:
    """One settled decision about the fact ``fact_id`` (content hash ``content_hash``)."""

    fact_id: str
    content_hash: str
    decision: str  # one of DECISIONS
    why: str
    at: datetime
    fields: Mapping[str, object] = field(default_factory=dict)  # superseded, updated: ``set``
    into: str | None = None  # merged: the fact that stays
    in_file: str | None = None  # recorded: the ledger (file name) the new line is in
    copies: int = 0  # duplicate: how many ledger lines hold the text


@dataclass(slots=True)
class Settled:
    """A fact's decisions folded in order: what reading makes of its ledger line."""

    content_hash: str
    hidden: Decision | None = None  # merged or expired: no read shows it
    fields: dict[str, object] = field(default_factory=dict)  # metadata over its line's
    newest_in: str | None = None  # recorded again: the ledger whose line it reads as
    copies_noted: int = 0  # the copies the last ``duplicate`` counted


@dataclass(frozen=True, slots=True)
class Journal:
    """The parsed journal file and its decisions folded: ``stamp``, what it was read at;
    ``consumed``, the bytes read up to the last complete line, and ``tail``, the bytes just
    before that, by which a later read knows the file only grew (then it parses the rest)."""

    stamp: Stamp | None
    settled: Mapping[str, Settled]
    hidden_hashes: frozenset[str] = frozenset()  # the ``OF_HASH_CHARS`` hashes of hidden facts
    consumed: int = 0
    tail: bytes = b""


EMPTY_JOURNAL = Journal(None, {})
TAIL_BYTES = 64  # what must be unchanged for a read to parse only what was appended


def render_decision(decision: Decision) -> str:
    """One journal line (no trailing newline): words for a person, JSON for reading."""
    at = decision.at.isoformat(timespec="seconds")
    meta: dict = {
        "at": decision.at.isoformat(),
        "id": decision.fact_id,
        "hash": decision.content_hash[:OF_HASH_CHARS],
        "decision": decision.decision,
    }
    if decision.fields:
        meta["set"] = dict(decision.fields)
    for name, value in (("into", decision.into), ("in", decision.in_file)):
        if value is not None:
            meta[name] = value
    if decision.copies:
        meta["copies"] = decision.copies
    words = f"{at} {decision.decision} {decision.fact_id}: {escape_text(decision.why)}"
    return f"- {words} <!-- settled {dump_meta(meta)} -->"


def parse_decision(line: str) -> Decision | None:
    """The decision on a journal line, or None (a heading, prose, a line cut by a crash)."""
    match = _LINE.match(line)
    if match is None:
        return None
    try:
        meta = json.loads(match.group("json"))
        decision = str(meta["decision"])
        at = parse_time(meta["at"])
        fields = meta.get("set") or {}
        if decision not in DECISIONS or at is None or not isinstance(fields, dict):
            return None
        return Decision(
            fact_id=str(meta["id"]),
            content_hash=str(meta.get("hash") or ""),
            decision=decision,
            why=unescape_text(match.group("words").partition(": ")[2]),
            at=at,
            fields=fields,
            into=_str_or_none(meta.get("into")),
            in_file=_str_or_none(meta.get("in")),
            copies=int(meta.get("copies") or 0),
        )
    except (ValueError, TypeError, KeyError, AttributeError, InvalidInputError):
        return None


def parse_journal(content: str) -> list[Decision]:
    return [d for line in content.split("\n") if (d := parse_decision(line)) is not None]


def fold(
    decisions: Iterable[Decision], previous: Mapping[str, Settled] | None = None
) -> dict[str, Settled]:
    """Each fact's decisions, applied in order (a later one over an earlier one), after
    ``previous`` (left as it is: an index being read may hold it)."""
    out: dict[str, Settled] = dict(previous or {})
    fresh: set[str] = set()  # states made here, which may change in place
    for d in decisions:
        if d.decision == "recorded":
            out[d.fact_id] = Settled(d.content_hash, newest_in=d.in_file)
            fresh.add(d.fact_id)
            continue
        if d.fact_id not in fresh:  # copied before it changes
            known = out.get(d.fact_id)
            out[d.fact_id] = (
                Settled(d.content_hash)
                if known is None
                else replace(known, fields=dict(known.fields))
            )
            fresh.add(d.fact_id)
        state = out[d.fact_id]
        if d.decision in HIDING:
            state.hidden = d
        elif d.decision == "duplicate":
            state.copies_noted = d.copies
        else:  # superseded, updated
            state.fields.update(d.fields)
    return out


def read_journal(path: Path, stamp: Stamp | None, previous: Journal | None) -> Journal:
    """The journal at ``path`` (read at ``stamp``: mtime, size, inode; None: there is
    none). ``previous`` is reused while its stamp is the same, and when the file only grew
    since (the same inode, the bytes before what it read unchanged) only the appended lines
    are parsed: a superseding record does not parse the whole journal again."""
    if stamp is None:
        return EMPTY_JOURNAL
    if previous is not None and previous.stamp == stamp:
        return previous
    start, base = 0, None
    if previous is not None and previous.stamp is not None and previous.stamp[2] == stamp[2]:
        start = max(0, previous.consumed - len(previous.tail))
        base = previous
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read()
    if base is not None and data.startswith(base.tail):
        data, offset = data[len(base.tail) :], base.consumed
    else:
        if start:  # rewritten in place: read it all
            with open(path, "rb") as handle:
                data = handle.read()
        base, offset = None, 0
    complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
    decisions = parse_journal(complete.decode("utf-8", errors="replace"))
    settled = fold(decisions, base.settled if base is not None else None)
    hidden = set(base.hidden_hashes) if base is not None else set()
    for fid in {d.fact_id for d in decisions}:
        state = settled[fid]
        short = state.content_hash[:OF_HASH_CHARS]
        if state.hidden is not None:
            hidden.add(short)
        else:
            hidden.discard(short)
    consumed = offset + len(complete)
    before = (base.tail if base is not None else b"") + complete
    return Journal(stamp, settled, frozenset(hidden), consumed, before[-TAIL_BYTES:])


def settle(fact: Fact, state: Settled | None) -> Fact:
    """``fact`` (as its ledger line reads) with the metadata its decisions set."""
    if state is None or not state.fields:
        return fact
    meta = {**fact_meta(fact), **state.fields}
    try:
        settled = fact_from_meta(
            fact.text, {k: v for k, v in meta.items() if v is not None}, fact.created_at
        )
    except (TypeError, ValueError, OverflowError, InvalidInputError):  # a hand-broken one
        return fact
    return replace(
        settled,
        id=fact.id,
        content_hash=fact.content_hash,
        scope=fact.scope,
        agent_id=fact.agent_id,
        access_count=fact.access_count,
        last_accessed_at=fact.last_accessed_at,
    )


def changed_fields(old: Fact, new: Fact) -> dict[str, object]:
    """The metadata fields ``new`` holds differently from ``old`` (None: back to the
    default), in the ledger comment's form."""
    before, after = fact_meta(old), fact_meta(new)
    return {
        k: after.get(k)
        for k in sorted(before.keys() | after.keys())
        if before.get(k) != after.get(k)
    }


def append_decisions(path: Path, decisions: Iterable[Decision]) -> int:
    """Append ``decisions`` durably (a new journal starts with its header); how many."""
    lines = [render_decision(d) + "\n" for d in decisions]
    if lines:
        append_durably(path, "".join(lines), header=JOURNAL_HEADER)
    return len(lines)


def drop_decisions(path: Path, fact_ids: Collection[str]) -> int:
    """Rewrite the journal without the decisions about ``fact_ids`` (their facts deleted, or
    in no fact file any more), atomically; how many lines went."""
    if not fact_ids or not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in read_text(path).split("\n"):
        decision = parse_decision(line)
        if decision is not None and decision.fact_id in fact_ids:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        write_atomically(path, "\n".join(kept))
    return dropped


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)
