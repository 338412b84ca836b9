"""Does Chinese word segmentation help the lexical leg? jieba's words beside (or instead of)
the tokenizer's CJK characters and bigrams (``indexing.tokenize``), BM25 alone, on the bundled
Chinese and mixed-language set (``--dataset synthetic-zh``): recall@3 per category.

jieba is not a dependency of the project (it was measured and not kept): ``pip install
jieba`` to run this.

    python -m benchmarks.lab.zh_segmentation
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import regex

from indexing.bm25 import BM25Index
from indexing.tokenize import normalize, tokenize
from memory_service.evaluation.datasets import synthetic_zh

_HAN_RUN = regex.compile(r"[\p{scx=Han}]+", regex.V1)


def _words(text: str) -> list[str]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    return [w for run in _HAN_RUN.findall(normalize(text)) for w in jieba.cut(run) if w.strip()]


def beside(text: str) -> list[str]:
    """Today's terms plus jieba's words longer than a bigram (a bigram is already a term)."""
    return tokenize(text) + [w for w in _words(text) if len(w) > 2]


def instead(text: str) -> list[str]:
    """Han runs as jieba's words only; every other term as today."""
    return [t for t in tokenize(text) if not _HAN_RUN.fullmatch(t)] + _words(text)


def recall_at_3(tokens: Callable[[str], list[str]]) -> dict[str, float]:
    per: dict[str, list[float]] = defaultdict(list)
    for conversation in synthetic_zh.generate().conversations:
        index = BM25Index([tokens(item.text) for item in conversation.items])
        refs = [item.refs[0] for item in conversation.items]
        for question in conversation.questions:
            top = [refs[h.index] for h in index.search(tokens(question.text), 3)]
            per[question.category].append(float(bool(question.gold.intersection(top))))
    return {c: float(np.mean(v)) for c, v in sorted(per.items())}


def main() -> None:
    for name, tokens in (("today", tokenize), ("+ jieba words", beside), ("jieba", instead)):
        row = recall_at_3(tokens)
        print(f"{name:14} " + "  ".join(f"{c} {100 * v:.1f}" for c, v in row.items()))


if __name__ == "__main__":
    main()
