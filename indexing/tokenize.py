"""One tokenizer for every lexical index (files BM25, Qdrant's sparse vectors, the session logs).

Every index must see the same terms, or the same query would rank differently depending on
where facts are stored. Rules, in order:

- Unicode NFKC and case folding (``normalize``: full-width letters, ligatures, compatibility
  forms); the text is then cut into CJK runs and words (letters, digits and the combining marks
  written on them, with inner apostrophes).
- **CJK runs** (Han, Hiragana, Katakana, Hangul: scripts written without spaces between words,
  and Korean's particles glued to their nouns) become their overlapping character bigrams *and*
  their characters (``cjk_grams``): "烤鸭" finds "王小明喜欢吃北京烤鸭", and a one-character word
  ("茶", "猫", "집") finds the runs it stands in. Lucene's ``CJKBigramFilter`` with
  ``outputUnigrams`` (Elasticsearch's ``cjk_bigram`` with ``output_unigrams: true``), except
  that a kana is a term only in its bigrams: alone it is a particle or an ending (の, を, ます),
  a stop word. Measured in ``benchmarks/RESULTS.md``, "Lexical leg: CJK runs".
- **Words**: English stop words are dropped as written, then English Snowball stemming
  (PyStemmer) of ASCII words. A word with accents gives two terms: its folded spelling
  (``fold``: the combining marks of Latin and Greek letters removed, and the Latin letters
  that carry theirs inside them, ø ł đ æ œ þ ..., spelled in ASCII, as Lucene's
  ``ASCIIFoldingFilter`` does), stemmed, and the word as written ("zürich" -> zurich zürich):
  "Zurich" finds "Zürich" and "cafe" finds "café", and where an accent tells two words apart
  (pinyin's tones, Vietnamese, Spanish año/ano) the one written alike ranks first
  (Elasticsearch's ``asciifolding`` with ``preserve_original``; measured against folding
  alone in ``benchmarks/RESULTS.md``, "Lexical leg: accents"). Folding comes before the
  stemmer so that the stemmer sees one spelling: "cafés" and "cafes" stem alike. Marks on
  other scripts (Devanagari's vowel signs, Thai's, Arabic's harakat) are part of the spelling
  and are kept.

``TOKENIZER_VERSION`` names these rules. Stores that keep terms made from them (Qdrant's sparse
vectors, PostgreSQL's session-log ``tsvector``) record it and rebuild what an older version made;
it must change whenever ``tokenize`` gives other terms for some text.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

import regex
import Stemmer

# 1: NFKC + case folding, Snowball, stop words, CJK bigrams (no unigrams), no folding.
# 2: + accented words folded (and kept as written), CJK unigrams (not kana) beside the
#    bigrams, CJK characters and combining marks by Unicode property (Han's 々 〆 〇 and
#    extensions B-H, Hangul jamo, the kana voicing marks; marks inside words).
TOKENIZER_VERSION = 2

# A CJK character: a letter, digit or mark whose script (extensions) is Han, Hiragana,
# Katakana or Hangul; so 々, ー and the kana voicing marks belong to a run, 、。「」 do not.
_CJK_CHAR = r"[[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]&&[\p{L}\p{N}\p{M}]]"
# A word: letters and digits (not CJK), each with the combining marks written on it; a mark
# with no letter before it (a lone variation selector after an emoji) is no word.
_WORD_PART = rf"(?:[[\p{{L}}\p{{N}}]--{_CJK_CHAR}]\p{{M}}*)+"
_TOKEN_RE = regex.compile(
    rf"(?P<cjk>{_CJK_CHAR}+)|{_WORD_PART}(?:['’]{_WORD_PART})*", regex.VERSION1
)
_CJK_RUN_RE = regex.compile(rf"{_CJK_CHAR}+", regex.VERSION1)
# The same words in ASCII text (most text), where the stdlib's engine is twice as fast.
_ASCII_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*", re.ASCII)
# Kana (Hiragana, Katakana, the prolonged-sound mark): a kana alone is a particle or an
# inflection's ending (の, は, を, ます), not a word, so kana are indexed in bigrams only.
_KANA_RE = regex.compile(r"[\p{scx=Hiragana}\p{scx=Katakana}]", regex.VERSION1)
# A combining mark on a Latin or Greek letter (after NFD): an accent, dropped by ``fold``.
_ACCENT_RE = regex.compile(r"(?<=[\p{Latin}\p{Greek}]\p{M}*)\p{M}", regex.VERSION1)
# Latin letters whose accent is part of the code point (no decomposition), as ASCII; the list
# of Lucene's ASCIIFoldingFilter for lower-case Latin-1 and Latin Extended-A.
_LETTERS = str.maketrans(
    {
        "æ": "ae",
        "ð": "d",
        "đ": "d",
        "ħ": "h",
        "ı": "i",
        "ĸ": "q",
        "ł": "l",
        "ŋ": "n",
        "ø": "o",
        "œ": "oe",
        "ß": "ss",
        "þ": "th",
        "ŧ": "t",
    }
)

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

# A Chinese question's interrogatives and sentence particles (什么, 哪里, 谁, 吗 ...) and the
# function words whose English counterparts the list above holds (是 is, 有 have, 不/没 not):
# terms as ``cjk_grams`` cuts them. A statement answering the question does not hold them, so
# counted in its IDF mass they only lowered every memory's query coverage (measured in
# ``benchmarks/RESULTS.md``, "Languages: cross-lingual ranking"). Dropped from questions
# only (``query_terms``): a memory saying 他什么都吃 keeps every term.
_QUESTION_TERMS_TEXT = """
    什么 什 么 怎么 怎 怎样 哪里 哪儿 哪 多少 吗 呢 吧 谁 几 是 有 不 没 没有 是不 有没
"""
QUESTION_STOP_TERMS: frozenset[str] = frozenset(_QUESTION_TERMS_TEXT.split())

_STEMMER = threading.local()  # PyStemmer's stemmers are not thread-safe: one per thread


def normalize(text: str) -> str:
    """NFKC + case folding: the canonical form every index and hash starts from. (Accents are
    not folded here: ``content_hash`` starts from this, and "résumé" and "resume" are two
    facts; they only match alike.)"""
    return unicodedata.normalize("NFKC", text).casefold()


@lru_cache(maxsize=16384)  # a pure function of the word; words repeat across facts
def fold(word: str) -> str:
    """``word`` (normalized) with the accents of its Latin and Greek letters removed: "zürich"
    -> "zurich", "ελληνικά" -> "ελληνικα", "việt" -> "viet", "łódź" -> "lodz". Other scripts'
    marks stay ("हिन्दी" is unchanged)."""
    if word.isascii():
        return word
    stripped = _ACCENT_RE.sub("", unicodedata.normalize("NFD", word))
    return unicodedata.normalize("NFC", stripped.translate(_LETTERS))


@lru_cache(maxsize=16384)  # a pure function of the word; words repeat across facts
def stem(word: str) -> str:
    """English Snowball ("Porter 2", the stemmer family of Lucene and Elasticsearch) through
    PyStemmer, for ASCII words; a possessive ``'s`` is dropped first. Other words (other
    scripts, inner apostrophes; an accented word reaches it folded, ``fold``) are returned
    unchanged: an English stemmer would only mangle them. Measured against the hand-written
    light stemmer it replaced in ``benchmarks/RESULTS.md`` ("Stemming")."""
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isascii() or not word.isalpha():
        return word
    stemmer = getattr(_STEMMER, "english", None)
    if stemmer is None:
        stemmer = _STEMMER.english = Stemmer.Stemmer("english")
    return stemmer.stemWord(word)


def cjk_grams(run: str) -> list[str]:
    """A CJK run's terms: each character, each followed by the pair it starts ("北京烤鸭" ->
    北 北京 京 京烤 烤 烤鸭 鸭); a kana is a term only in its pairs ("猫が好き" -> 猫 猫が が好
    好 好き), unless it is the whole run; a lone character is one term."""
    if len(run) == 1:
        return [run]
    out = [] if _KANA_RE.match(run[0]) else [run[0]]
    for i in range(1, len(run)):
        out.append(run[i - 1 : i + 1])
        if not _KANA_RE.match(run[i]):
            out.append(run[i])
    return out


def tokenize(text: str, *, stop_words: Iterable[str] | None = STOP_WORDS) -> list[str]:
    """Terms of ``text`` in order (a CJK run's as ``cjk_grams`` gives them), duplicates kept
    (BM25 needs term frequencies)."""
    stops = stop_words if stop_words is not None else ()
    out: list[str] = []
    text = normalize(text)
    if text.isascii():
        for word in _ASCII_WORD_RE.findall(text):
            if word not in stops and (term := stem(word)) and term not in stops:
                out.append(term)
        return out
    for match in _TOKEN_RE.finditer(text):
        if match.group("cjk") is not None:
            out.extend(cjk_grams(match.group(0)))
            continue
        piece = match.group(0).replace("’", "'")
        if piece in stops:
            continue
        if piece.isascii():
            term = stem(piece)
            if term and term not in stops:
                out.append(term)
            continue
        # the stop list is English: a word written with accents is none of its words, even
        # where its folded spelling is one ("hé" in pinyin)
        folded = fold(piece)
        term = stem(folded)
        if term:
            out.append(term)
        if folded != piece:
            out.append(piece)  # as written too: an accent that matches counts, lightly
    return out


def query_terms(text: str) -> list[str]:
    """The terms a question is searched with: ``tokenize``'s, less the Chinese question and
    function words (``QUESTION_STOP_TERMS``); English ones are stop words on both sides
    already."""
    return [term for term in tokenize(text) if term not in QUESTION_STOP_TERMS]


def document_length(terms: Sequence[str]) -> int:
    """How many positions ``terms`` (``tokenize``'s) fill: the length BM25's norm counts, in
    both lexical indexes. A term stacked on another's position adds none (as Lucene's stacked
    tokens, at position increment 0, add none under BM25's ``discountOverlaps``): a CJK run is
    as long as its bigrams, its characters standing on their positions (a run of one is one
    long), and a word with accents is one word, its spelling as written standing on its
    folded one. So every text is exactly as long as version 1 counted it: the characters and
    spellings version 2 adds are more ways to match, never a longer memory."""
    count = 0
    for i, term in enumerate(terms):
        if term.isascii():
            count += 1
        elif _CJK_RUN_RE.fullmatch(term):
            count += len(term) == 2 or not _in_longer_run(terms, i)
        elif fold(term) == term:
            count += 1
    return count


def _in_longer_run(terms: Sequence[str], i: int) -> bool:
    """Whether the character ``terms[i]`` stands in a run of two or more (``cjk_grams`` puts
    it right before the bigram it starts, or, last of its run, right after the one it ends; a
    kana has a term of its own only as a run of one)."""
    char = terms[i]
    if _KANA_RE.match(char):
        return False
    after = terms[i + 1] if i + 1 < len(terms) else ""
    before = terms[i - 1] if i > 0 else ""
    return _is_bigram(after) and after[0] == char or _is_bigram(before) and before[1] == char


def _is_bigram(term: str) -> bool:
    return len(term) == 2 and _CJK_RUN_RE.fullmatch(term) is not None
