"""One tokenizer for every lexical index (files BM25 and Qdrant's sparse vectors).

Both backends must see the same terms, or the same query would rank differently depending on
where facts are stored. Rules: Unicode NFKC, case folding, Latin/Cyrillic/... words and numbers,
English Snowball stemming (PyStemmer), English stop words removed; CJK runs become overlapping
character bigrams (a single CJK character stays a unigram), so "花生" finds "用户对花生过敏".
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

import Stemmer

# Han, Hiragana, Katakana, Hangul: scripts written without spaces between words.
_CJK = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uac00-\ud7af"  # Hangul syllables
)
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*")
_CJK_RE = re.compile(rf"[{_CJK}]")

_STOP_WORDS_TEXT = """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do
    does doesn't doing don't down during each few for from further had hadn't has hasn't
    have haven't having he he'd he'll he's her here here's hers herself him himself his how
    how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
    mustn't my myself no nor not of off on once only or other ought our ours ourselves out
    over own same shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll
    they're they've this those through to too under until up very was wasn't we we'd we'll
    we're we've were weren't what what's when when's where where's which while who who's
    whom why why's with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves s t d ll m re ve also just will
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())

_STEMMER = threading.local()  # PyStemmer's stemmers are not thread-safe: one per thread


def normalize(text: str) -> str:
    """NFKC + case folding: the canonical form every index and hash starts from."""
    return unicodedata.normalize("NFKC", text).casefold()


@lru_cache(maxsize=16384)  # a pure function of the word; words repeat across facts
def stem(word: str) -> str:
    """English Snowball ("Porter 2", the stemmer family of Lucene and Elasticsearch) through
    PyStemmer, for ASCII words; a possessive ``'s`` is dropped first. Other words (accents,
    other scripts, inner apostrophes) are returned unchanged: an English stemmer would only
    mangle them. Measured against the hand-written light stemmer it replaced in
    ``benchmarks/RESULTS.md`` ("Stemming")."""
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isascii() or not word.isalpha():
        return word
    stemmer = getattr(_STEMMER, "english", None)
    if stemmer is None:
        stemmer = _STEMMER.english = Stemmer.Stemmer("english")
    return stemmer.stemWord(word)


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str, *, stop_words: Iterable[str] | None = STOP_WORDS) -> list[str]:
    """Terms of ``text`` in order, duplicates kept (BM25 needs term frequencies)."""
    stops = stop_words if stop_words is not None else ()
    out: list[str] = []
    for match in _TOKEN_RE.finditer(normalize(text)):
        piece = match.group(0)
        if _CJK_RE.match(piece):
            out.extend(_cjk_grams(piece))
            continue
        piece = piece.replace("’", "'")
        if piece in stops:
            continue
        term = stem(piece)
        if term and term not in stops:
            out.append(term)
    return out
