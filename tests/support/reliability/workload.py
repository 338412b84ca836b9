"""Random but reproducible test data, and a paginating reader of what the server holds."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx

# Everyday words, shared by every tenant and user on purpose: retrieval must separate owners
# by filter, never by vocabulary.
_WORDS_TEXT = (
    "apple banana coffee tea peanut allergy window seat flight train paris berlin tokyo "
    "doctor dentist meeting monday friday birthday sister brother garden bicycle running "
    "guitar piano novel python rust database server backup invoice budget holiday beach "
    "mountain winter summer spicy vegan dinner lunch breakfast office remote project "
    "deadline report camera phone laptop keyboard music jazz football tennis swimming "
    "yoga cat dog parrot hospital school library museum theatre cinema market bakery"
)
WORDS = tuple(_WORDS_TEXT.split())


def sentence(rng: random.Random, words: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def fact_text(rng: random.Random, tag: str, *, big: bool = False) -> str:
    """A fact that is unique by ``tag`` and otherwise made of shared words."""
    body = sentence(rng, rng.randint(5, 12))
    if big:  # several pages of text: an append that spans more than one write
        body += " " + " ".join(sentence(rng, 12) for _ in range(rng.randint(20, 60)))
    return f"{tag} {body}"


def list_facts(
    client: httpx.Client, user: str, *, include_inactive: bool = True, page: int = 1000
) -> list[dict[str, Any]]:
    """Every fact of ``user`` through ``GET /v1/memories`` (all pages)."""
    return list(iter_facts(client, user, include_inactive=include_inactive, page=page))


def iter_facts(
    client: httpx.Client, user: str, *, include_inactive: bool = True, page: int = 1000
) -> Iterator[dict[str, Any]]:
    cursor = None
    for _ in range(100_000):  # bounded: a cursor that never ends is a bug, not a loop
        params: dict[str, Any] = {"user_id": user, "limit": page}
        if include_inactive:
            params["include_inactive"] = "true"
        if cursor:
            params["cursor"] = cursor
        response = client.get("/v1/memories", params=params)
        response.raise_for_status()
        body = response.json()
        yield from body["items"]
        cursor = body["next_cursor"]
        if not cursor:
            return
    raise RuntimeError("listing did not end after 100,000 pages")
