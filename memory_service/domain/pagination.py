"""Keyset pagination of facts, the same in every backend: oldest first, then id, with an
opaque cursor that names the last fact of the page (no offsets: a page never skips or repeats
a fact when others are written meanwhile)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact, iso_time, parse_time
from memory_service.domain.limits import MAX_PAGE_SIZE

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None = None


def sort_key(fact: Fact) -> tuple[str, str]:
    """Stable listing order: oldest first, then id (keyset pagination key). Times are compared
    as UTC ISO strings, so every backend pages identically whatever offset a caller used."""
    return (iso_time(parse_time(fact.created_at)) or "", fact.id)


def encode_cursor(fact: Fact) -> str:
    raw = json.dumps(list(sort_key(fact))).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, fid = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return str(created), str(fid)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidInputError("invalid cursor", code="invalid_cursor") from exc


def check_page(limit: int, cursor: str | None) -> None:
    """Refuse a bad page request (``invalid_limit``, ``invalid_cursor``) before any read."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInputError(f"limit must be 1-{MAX_PAGE_SIZE}", code="invalid_limit")
    if cursor:
        decode_cursor(cursor)


def paginate(facts: Sequence[Fact], limit: int, cursor: str | None) -> Page[Fact]:
    """Keyset page over facts in ``sort_key`` order, shared by every backend."""
    check_page(limit, cursor)
    ordered = sorted(facts, key=sort_key)
    if cursor:
        after = decode_cursor(cursor)
        ordered = [f for f in ordered if sort_key(f) > after]
    page = ordered[:limit]
    next_cursor = encode_cursor(page[-1]) if len(ordered) > limit else None
    return Page(items=page, next_cursor=next_cursor)
