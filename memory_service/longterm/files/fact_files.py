"""The Markdown fact-file format: one fact per bullet, metadata in a trailing HTML comment.

    - User is allergic to peanuts <!-- memory {"key":"user.allergy","importance":8,...} -->

The fact's ``source`` (origin, session, message numbers, source text) is an object in that
comment; an older fact file's plain-string ``source`` reads as its origin label.

A person can read and edit these files; a bullet written by hand without the comment is a fact
too (kind ``fact``, created on the fact file's date). A MEMORY.md bullet that consolidation
wrote names the facts it stands for in ``"of"`` (their content hashes, cut to
``OF_HASH_CHARS``), so reading can tell that a fact it summarised was edited or deleted since.

Text is escaped so a fact can never break its line or forge a comment: backslash, line breaks
and ``<!--`` are written as escapes, and the JSON never contains ``-->``. Lines are split on
``\\n`` only (not ``str.splitlines``, which would also split on U+2028 and friends).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact, Phrasing, Source, parse_time

OF_HASH_CHARS = 16  # 64 bits of the content hash: no collision among one user's facts

_BULLET = re.compile(r"^\s*[-*+]\s+(?P<body>.*?)\s*$")
_META = re.compile(r"^(?P<text>.*?)\s*<!--\s*memory\s+(?P<json>\{.*\})\s*-->$")
_ESCAPE_CHARS = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")


def escape_text(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPE_CHARS:
            out.append(_ESCAPE_CHARS[ch])
        elif ord(ch) < 0x20 or ch in "\x7f\x85\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out).replace("<!--", "<\\!--")


def unescape_text(text: str) -> str:
    def repl(match: re.Match[str]) -> str:
        token = match.group(1)
        if token.startswith("u") and len(token) == 5:
            return chr(int(token[1:], 16))
        return {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "!": "!"}.get(token, "\\" + token)

    return _UNESCAPE.sub(repl, text)


def dump_meta(meta: dict) -> str:
    """``meta`` as the JSON of a comment: one line, never ``-->`` nor ``<!--``."""
    raw = json.dumps(meta, ensure_ascii=False, separators=(",", ":"))
    for ch in ("\x85", "\u2028", "\u2029"):
        raw = raw.replace(ch, f"\\u{ord(ch):04x}")
    return raw.replace("-->", "--\\u003e").replace("<!--", "\\u003c!--")


def fact_meta(fact: Fact) -> dict:
    """The metadata a bullet's comment holds for ``fact`` (defaults left out)."""
    meta: dict = {}
    if fact.key is not None:
        meta["key"] = fact.key
    if fact.kind != "fact":
        meta["kind"] = fact.kind
    meta["importance"] = fact.importance
    if fact.confidence != 1.0:
        meta["confidence"] = fact.confidence
    if fact.tags:
        meta["tags"] = list(fact.tags)
    if fact.source is not None:
        meta["source"] = {k: v for k, v in fact.source.to_dict().items() if v}
    for name in ("session_id", "superseded_by"):
        value = getattr(fact, name)
        if value is not None:
            meta[name] = value
    for name in ("created_at", "expires_at", "valid_to"):
        value = getattr(fact, name)
        if value is not None:
            meta[name] = value.isoformat()
    if fact.updated_at is not None and fact.updated_at != fact.created_at:
        meta["updated_at"] = fact.updated_at.isoformat()  # else: updated when created
    if fact.phrasings:
        meta["phrasings"] = [_phrasing_meta(p) for p in fact.phrasings]
    return meta


def _phrasing_meta(phrasing: Phrasing) -> dict:
    out: dict = {"text": phrasing.text}
    if phrasing.source is not None:
        out["source"] = {k: v for k, v in phrasing.source.to_dict().items() if v}
    if phrasing.recorded_at is not None:
        out["recorded_at"] = phrasing.recorded_at.isoformat()
    return out


def render_fact(fact: Fact, *, of: Iterable[str] = ()) -> str:
    """One bullet line (no trailing newline); ``of``: the content hashes of the facts a
    MEMORY.md bullet stands for."""
    meta = fact_meta(fact)
    if of_hashes := sorted({h[:OF_HASH_CHARS] for h in of if h}):
        meta["of"] = of_hashes
    return f"- {escape_text(fact.text)} <!-- memory {dump_meta(meta)} -->"


@dataclass(frozen=True, slots=True)
class FactLine:
    """A parsed bullet: the fact (without derived id/hash), its 1-based line number and, for
    a consolidated MEMORY.md bullet, the hashes of the facts it stands for."""

    line_no: int
    fact: Fact
    of: tuple[str, ...] = ()


def parse_line(line: str, *, default_created_at: datetime | None) -> Fact | None:
    """The fact on a bullet line, or None for any other line (headings, prose, blanks)."""
    parsed = _parse_bullet(line, default_created_at)
    return None if parsed is None else parsed[0]


def _parse_bullet(
    line: str, default_created_at: datetime | None
) -> tuple[Fact, tuple[str, ...]] | None:
    """The fact on a bullet line and the ``of`` hashes of its comment."""
    bullet = _BULLET.match(line)
    if not bullet:
        return None
    body = bullet.group("body")
    meta: dict = {}
    match = _META.match(body)
    if match:
        try:
            loaded = json.loads(match.group("json"))
            if isinstance(loaded, dict):
                meta = loaded
                body = match.group("text")
        except ValueError:
            pass  # a broken comment: keep the whole line as text rather than lose it
    text = unescape_text(body).strip()
    if not text:
        return None
    of = meta.get("of")
    of_hashes = tuple(str(h) for h in of) if isinstance(of, list) else ()
    try:
        fact = fact_from_meta(text, meta, default_created_at)
    except (TypeError, ValueError, OverflowError, InvalidInputError):  # a hand-broken field
        fact = Fact(text=text, created_at=default_created_at, updated_at=default_created_at)
    return fact, of_hashes


def fact_from_meta(text: str, meta: dict, default_created_at: datetime | None) -> Fact:
    """The fact ``text`` with the metadata of a comment (``fact_meta``'s form); a field
    that is missing or None takes its default. Raises ``ValueError`` and friends on a field
    that cannot be read."""
    tags = meta.get("tags") or ()
    created = parse_time(meta.get("created_at")) or default_created_at
    return Fact(
        text=text,
        key=_str_or_none(meta.get("key")),
        kind=str(meta.get("kind") or "fact"),
        importance=_clamp_int(_or_default(meta, "importance", 5), 1, 10),
        confidence=float(_or_default(meta, "confidence", 1.0)),
        tags=tuple(str(t) for t in tags) if isinstance(tags, list | tuple) else (),
        source=_source_or_none(meta.get("source")),
        session_id=_str_or_none(meta.get("session_id")),
        created_at=created,
        updated_at=parse_time(meta.get("updated_at")) or created,
        expires_at=parse_time(meta.get("expires_at")),
        superseded_by=_str_or_none(meta.get("superseded_by")),
        valid_to=parse_time(meta.get("valid_to")),
        phrasings=_phrasings(meta.get("phrasings")),
    )


def parse_fact_file(content: str, *, default_created_at: datetime | None) -> list[FactLine]:
    out = []
    for number, line in enumerate(content.split("\n"), start=1):
        parsed = _parse_bullet(line, default_created_at)
        if parsed is not None:
            out.append(FactLine(number, *parsed))
    return out


def rewrite_fact_file(content: str, replacements: dict[int, Fact | None]) -> str:
    """``content`` with the bullets at the given line numbers replaced (None: removed); a
    replaced bullet keeps the ``of`` hashes it had."""
    lines = content.split("\n")
    out = []
    for number, line in enumerate(lines, start=1):
        if number in replacements:
            fact = replacements[number]
            if fact is not None:
                old = _parse_bullet(line, None)
                out.append(render_fact(fact, of=old[1] if old else ()))
        else:
            out.append(line)
    return "\n".join(out)


def render_lines(facts: Iterable[Fact]) -> str:
    return "".join(render_fact(f) + "\n" for f in facts)


def _source_or_none(value: object) -> Source | None:
    """The bullet's source: an object, or an old fact file's plain string (its origin label); a
    hand-broken one is dropped rather than losing the fact's other metadata."""
    try:
        return Source.coerce(value)
    except InvalidInputError:
        return None


def _phrasings(value: object) -> tuple[Phrasing, ...]:
    """The bullet's phrasings; a hand-broken one is dropped rather than the fact's metadata."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        try:
            out.append(Phrasing.coerce(item))
        except InvalidInputError:
            continue
    return tuple(out)


def _or_default(meta: dict, name: str, default: object) -> object:
    value = meta.get(name)
    return default if value is None else value


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _clamp_int(value: object, low: int, high: int) -> int:
    return max(low, min(high, int(value)))  # type: ignore[arg-type]
