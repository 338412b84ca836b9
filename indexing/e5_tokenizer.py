"""multilingual-e5-small's tokenizer: the file's Unigram vocabulary, cut as its engine cuts.

The steps are the package engine's (``e5.c``'s ``tok_content``): each character replaced by the
file's normalisation map (NFKC-like; control characters dropped, odd spaces made spaces), runs
of spaces collapsed, a space put before the text unless it starts with one, spaces written as
``▁``, then the Viterbi best segmentation into vocabulary pieces by their scores, an unknown
character costing the lowest score less 10. No piece holds a ``▁`` past its first character, so
every ``▁`` starts a piece and each word is cut on its own: a word's pieces are remembered
(``WORD_CACHE`` words), as most words recur.

Why not the ``tokenizers`` library's Unigram model: built from these 250,002 pieces it held
more memory than the rest of the embedder together, several times this dictionary's, which
cuts a question as fast (``benchmarks/RESULTS.md``, "multilingual-e5-small as a second
embedder").
"""

from __future__ import annotations

import functools
import re

from indexing.e5_file import E5File

METASPACE = "\u2581"
WORD_CACHE = 1 << 16
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{METASPACE}[^{METASPACE}]*|[^{METASPACE}]+")
_UNK_PENALTY = 10.0


class E5Tokenizer:
    """Text to token ids, ``<s>`` and ``</s>`` included, cut at ``max_length`` tokens."""

    def __init__(self, model: E5File, *, max_length: int | None = None) -> None:
        self._translation = dict(model.normalise)
        self._ids = {p: i for i, p in enumerate(model.pieces) if p and i != model.unk}
        self._scores = model.scores.tolist()
        self._unk, self._bos, self._eos = model.unk, model.bos, model.eos
        self._unk_score = float(model.scores.min()) - _UNK_PENALTY
        self._longest = max(len(p) for p in model.pieces)
        self.max_length = max_length or model.max_positions
        self._word = functools.lru_cache(maxsize=WORD_CACHE)(self._cut)

    def encode(self, text: str) -> list[int]:
        """The ids the model sees for ``text`` (prefix included by the caller)."""
        text = _SPACES.sub(" ", text.translate(self._translation))
        if not text.startswith(" "):
            text = " " + text
        content: list[int] = []
        for word in _WORDS.findall(text.replace(" ", METASPACE)):
            content += self._word(word)
        return [self._bos, *content[: self.max_length - 2], self._eos]

    def _cut(self, word: str) -> tuple[int, ...]:
        """The best-scoring segmentation of ``word`` (Viterbi, ties to the first found)."""
        n = len(word)
        best = [float("-inf")] * (n + 1)
        best[0] = 0.0
        piece = [0] * (n + 1)
        start = [0] * (n + 1)
        ids, scores = self._ids, self._scores
        for i in range(n):
            here = best[i]
            if here == float("-inf"):
                continue
            for end in range(i + 1, min(n, i + self._longest) + 1):
                found = ids.get(word[i:end])
                if found is not None and here + scores[found] > best[end]:
                    best[end], piece[end], start[end] = here + scores[found], found, i
            if here + self._unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = here + self._unk_score, self._unk, i
        out = []
        at = n
        while at > 0:
            out.append(piece[at])
            at = start[at]
        return tuple(reversed(out))
