"""Content hashes: exact identity of a fact, and SimHash for near-duplicates.

``content_hash`` decides whether two facts are "the same fact" (and so their derived ids): case,
Unicode form and whitespace never make two facts different. ``simhash`` is a 64-bit locality
sensitive fingerprint; maintenance compares Hamming distances to find near-duplicates.
"""

from __future__ import annotations

import hashlib
import re

from indexing.tokenize import normalize, tokenize

_WS = re.compile(r"\s+")


def normalize_for_hash(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed and trimmed."""
    return _WS.sub(" ", normalize(text)).strip()


def content_hash(text: str) -> str:
    """Hex SHA-256 of the normalised text."""
    return hashlib.sha256(normalize_for_hash(text).encode("utf-8")).hexdigest()


def _feature_hash(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")


def simhash(text: str) -> int:
    """64-bit SimHash over the text's terms and term bigrams (stop words kept: they carry shape)."""
    terms = tokenize(text, stop_words=None)
    features = terms + [f"{a} {b}" for a, b in zip(terms, terms[1:], strict=False)]
    if not features:
        return 0
    weights = [0] * 64
    for feature in features:
        h = _feature_hash(feature)
        for bit in range(64):
            weights[bit] += 1 if (h >> bit) & 1 else -1
    value = 0
    for bit, weight in enumerate(weights):
        if weight > 0:
            value |= 1 << bit
    return value


def hamming_distance(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints."""
    return (a ^ b).bit_count()
