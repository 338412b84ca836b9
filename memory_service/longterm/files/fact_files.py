"""The Markdown fact-file format: one fact per bullet, metadata in a trailing HTML comment.

    - User is allergic to peanuts <!-- memory {"key":"user.allergy","importance":8,...} -->

The fact's ``source`` (origin, session, message numbers, source text) is an object in that
comment; an older fact file's plain-string ``source`` reads as its origin label.

A person can read and edit these files; a bullet written by hand without the comment is a fact
too (kind ``fact``, created on the fact file's date). Text is escaped so a fact can never break
its line or forge a comment: backslash, line breaks and ``<!--`` are written as escapes, and
the JSON never contains ``-->``. Lines are split on ``\\n`` only (not ``str.splitlines``, which
would also split on U+2028 and friends).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from memory_service.errors import InvalidInputError
from memory_service.facts import Fact, Source, parse_time

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


def _dump_meta(meta: dict) -> str:
    raw = json.dumps(meta, ensure_ascii=False, separators=(",", ":"))
    for ch in ("\x85", "\u2028", "\u2029"):
        raw = raw.replace(ch, f"\\u{ord(ch):04x}")
    return raw.replace("-->", "--\\u003e").replace("<!--", "\\u003c!--")


def render_fact(fact: Fact) -> str:
    """One bullet line (no trailing newline)."""
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
    return f"- {escape_text(fact.text)} <!-- memory {_dump_meta(meta)} -->"


@dataclass(frozen=True, slots=True)
class FactLine:
    """A parsed bullet: the fact (without derived id/hash) and its 1-based line number."""

    line_no: int
    fact: Fact


def parse_line(line: str, *, default_created_at: datetime | None) -> Fact | None:
    """The fact on a bullet line, or None for any other line (headings, prose, blanks)."""
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
    try:
        tags = meta.get("tags") or ()
        return Fact(
            text=text,
            key=_str_or_none(meta.get("key")),
            kind=str(meta.get("kind") or "fact"),
            importance=_clamp_int(meta.get("importance", 5), 1, 10),
            confidence=float(meta.get("confidence", 1.0)),
            tags=tuple(str(t) for t in tags) if isinstance(tags, list | tuple) else (),
            source=_source_or_none(meta.get("source")),
            session_id=_str_or_none(meta.get("session_id")),
            created_at=parse_time(meta.get("created_at")) or default_created_at,
            expires_at=parse_time(meta.get("expires_at")),
            superseded_by=_str_or_none(meta.get("superseded_by")),
            valid_to=parse_time(meta.get("valid_to")),
        )
    except (TypeError, ValueError):
        return Fact(text=text, created_at=default_created_at)


def parse_fact_file(content: str, *, default_created_at: datetime | None) -> list[FactLine]:
    out = []
    for number, line in enumerate(content.split("\n"), start=1):
        fact = parse_line(line, default_created_at=default_created_at)
        if fact is not None:
            out.append(FactLine(number, fact))
    return out


def rewrite_fact_file(content: str, replacements: dict[int, Fact | None]) -> str:
    """``content`` with the bullets at the given line numbers replaced (None: removed)."""
    lines = content.split("\n")
    out = []
    for number, line in enumerate(lines, start=1):
        if number in replacements:
            fact = replacements[number]
            if fact is not None:
                out.append(render_fact(fact))
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


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _clamp_int(value: object, low: int, high: int) -> int:
    return max(low, min(high, int(value)))  # type: ignore[arg-type]
