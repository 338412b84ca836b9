"""How the lexical leg should cut CJK runs, and whether accents should be folded: measured on
4,354 graded Chinese sentences whose words are segmented by hand (HSK 3.0, levels 1-6).

Each sentence is one memory, BM25 (``indexing.bm25``, the files backend's) over the terms a
scheme gives it; each distinct word of the gold segmentation is one query, and the memories
relevant to it are the sentences that hold it *as a word* (gold tokens), so a scheme is
rewarded for finding "茶" in "我喜欢喝茶" and charged for ranking "茶" inside "茶几" (a
different word) above it. Each word is asked alone and inside three short questions
("关于茶呢？", "茶怎么样？", "我的茶在哪儿？"), where its characters meet the question's in
one run. Per word length: R@10 (relevant memories in the top 10, over min(relevant, 10)),
MRR, "found" (share of relevant memories with any BM25 hit at all: a missed one cannot be
recalled by the lexical leg at any depth) and P@10 (share of the top 10 that is relevant).

CJK schemes (documents / queries):

- ``bigrams``: overlapping bigrams, a lone character a unigram (Lucene's ``CJKAnalyzer``,
  Elasticsearch's ``cjk`` analyzer; the tokenizer's version 1);
- ``unigrams``: each character;
- ``uni+bi``: both, on both sides (``cjk_bigram`` with ``output_unigrams``; version 2);
- ``uni+bi/bi``: both in documents, bigrams in queries (a one-character query a unigram).

Accents, on the same sentences' pinyin (tone marks are accents that tell syllables apart:
mā má mǎ mà): documents are each sentence's pinyin with tones, queries each word's pinyin
with tones ("as written") and without ("typed bare"). Schemes: ``none`` (version 1),
``fold`` (the folded spelling alone, Lucene's ``ASCIIFoldingFilter``), ``fold+original`` (the
folded term and the word as written, Elasticsearch's ``asciifolding`` with
``preserve_original``; version 2).

The data is a PyPI package's (CC BY-SA 4.0), not the project's:

    pip install hsk-sentences-audio          # not a service dependency
    python -m benchmarks.lab.scripts_lexical [--hsk PATH/sentences.json] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import mean

import numpy as np

import indexing.tokenize as tk
from indexing.bm25 import BM25Index

Tokens = Callable[[str], list[str]]


def load_hsk(path: Path | None) -> list[dict]:
    if path is None:
        try:
            import hsk_sentences_audio
        except ImportError:
            raise SystemExit(
                "needs the sentences: pip install hsk-sentences-audio, or --hsk PATH"
            ) from None
        path = Path(hsk_sentences_audio.__file__).parent / "data" / "sentences.json"
    return json.loads(path.read_text(encoding="utf-8"))


# -- CJK schemes ----------------------------------------------------------------------------


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def _unigrams(run: str) -> list[str]:
    return list(run)


def _with_grams(grams: Callable[[str], list[str]]) -> Tokens:
    def tokens(text: str) -> list[str]:
        saved = tk.cjk_grams
        tk.cjk_grams = grams
        try:
            return tk.tokenize(text)
        finally:
            tk.cjk_grams = saved

    return tokens


CJK_SCHEMES: dict[str, tuple[Tokens, Tokens]] = {
    "bigrams": (_with_grams(_bigrams), _with_grams(_bigrams)),
    "unigrams": (_with_grams(_unigrams), _with_grams(_unigrams)),
    "uni+bi": (tk.tokenize, tk.tokenize),
    "uni+bi/bi": (tk.tokenize, _with_grams(_bigrams)),
}


# -- accent schemes -------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return [m.group(0) for m in tk._TOKEN_RE.finditer(tk.normalize(text))]


def _no_fold(text: str) -> list[str]:  # version 1: accented words kept as written, unstemmed
    return [w if not w.isascii() else tk.stem(w) for w in _words(text) if w not in tk.STOP_WORDS]


def _fold_only(text: str) -> list[str]:  # the folded spelling alone
    return [tk.stem(tk.fold(w)) for w in _words(text) if w not in tk.STOP_WORDS]


ACCENT_SCHEMES: dict[str, Tokens] = {
    "none": _no_fold,
    "fold": _fold_only,
    "fold+original": tk.tokenize,  # version 2
}


def bare(pinyin: str) -> str:
    """Pinyin typed without tone marks."""
    return tk.fold(tk.normalize(pinyin))


# -- scoring --------------------------------------------------------------------------------


def evaluate(
    docs: Sequence[list[str]],
    queries: Sequence[tuple[list[str], set[int], str]],
    *,
    stacked: bool,
) -> dict[str, dict[str, float]]:
    """Metrics per query group (``queries``: terms, relevant memories, group). ``stacked``: the
    documents are ``tokenize``'s, whose stacked terms add no length (``document_length``);
    otherwise every term is a position of its own (Lucene's count for those schemes)."""
    lengths = None if stacked else [len(doc) for doc in docs]
    index = BM25Index(docs, lengths=lengths)
    rows: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for terms, relevant, group in queries:
        scores = index.scores(terms)
        hit = np.flatnonzero(scores > 0)
        ranked = hit[np.argsort(-scores[hit], kind="stable")]
        top = [int(i) for i in ranked[:10]]
        r10 = len(relevant.intersection(top)) / min(len(relevant), 10)
        rr = next((1.0 / (r + 1) for r, i in enumerate(ranked) if int(i) in relevant), 0.0)
        found = len(relevant.intersection(int(i) for i in hit)) / len(relevant)
        p10 = len(relevant.intersection(top)) / len(top) if top else 0.0
        rows[group].append((r10, rr, found, p10))
        rows["all"].append((r10, rr, found, p10))
    return {
        group: {
            "n": len(values),
            "R@10": 100 * mean(v[0] for v in values),
            "MRR": 100 * mean(v[1] for v in values),
            "found": 100 * mean(v[2] for v in values),
            "P@10": 100 * mean(v[3] for v in values),
        }
        for group, values in rows.items()
    }


# Questions a word is asked in (its characters then meet others' in one run): "what about w?",
# "how is w?", "where is my w?"
QUESTIONS = ("关于{}呢？", "{}怎么样？", "我的{}在哪儿？")


def _length_group(word: str) -> str:
    return f"{min(len(word), 3)}{'+' if len(word) >= 3 else ''} char"


def cjk_table(sentences: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    holders: dict[str, set[int]] = defaultdict(set)
    for i, s in enumerate(sentences):
        for token in s["tokens"]:
            if tk._TOKEN_RE.fullmatch(token["word"]) and tk.regex.fullmatch(
                rf"{tk._CJK_CHAR}+", token["word"], tk.regex.VERSION1
            ):
                holders[token["word"]].add(i)
    out = {}
    for name, (doc_tokens, query_tokens) in CJK_SCHEMES.items():
        docs = [doc_tokens(s["chinese"]) for s in sentences]
        queries = []
        for word, relevant in sorted(holders.items()):
            queries.append((query_tokens(word), relevant, _length_group(word)))
            for template in QUESTIONS:  # the word inside a question's run
                group = f"{_length_group(word)}, in a question"
                asked = (query_tokens(template.format(word)), relevant, group)
                queries.append(asked)
        out[name] = evaluate(docs, queries, stacked=doc_tokens is tk.tokenize)
    return out


def accent_table(sentences: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    holders: dict[str, set[int]] = defaultdict(set)
    spelled: dict[str, str] = {}
    for i, s in enumerate(sentences):
        for token in s["tokens"]:
            if token.get("pinyin"):
                holders[token["word"]].add(i)
                spelled.setdefault(token["word"], token["pinyin"])
    out = {}
    for name, tokens in ACCENT_SCHEMES.items():
        docs = [tokens(s["pinyin"]) for s in sentences]
        queries = []
        for word, relevant in sorted(holders.items()):
            queries.append((tokens(spelled[word]), relevant, "as written"))
            queries.append((tokens(bare(spelled[word])), relevant, "typed bare"))
        stacked = tokens is tk.tokenize
        out[name] = evaluate(docs, [q for q in queries if q[0]], stacked=stacked)
    return out


def _print(title: str, table: dict[str, dict[str, dict[str, float]]]) -> None:
    groups = sorted({g for rows in table.values() for g in rows}, key=lambda g: (g == "all", g))
    print(f"\n{title}: R@10 / MRR / found / P@10")
    print("| scheme | " + " | ".join(f"{g} (n={table[next(iter(table))][g]['n']})" for g in groups))
    for name, rows in table.items():
        cells = [
            "{R@10:.1f} / {MRR:.1f} / {found:.1f} / {P@10:.1f}".format(**rows[g]) for g in groups
        ]
        print(f"| {name} | " + " | ".join(cells))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hsk", type=Path, help="sentences.json of hsk-sentences-audio")
    parser.add_argument("--json", type=Path, help="write both tables as JSON")
    args = parser.parse_args(argv)
    sentences = load_hsk(args.hsk)
    cjk = cjk_table(sentences)
    accents = accent_table(sentences)
    _print(f"CJK runs, {len(sentences)} sentences, gold words as queries", cjk)
    _print("Pinyin with tone marks, each word's pinyin as the query", accents)
    if args.json:
        args.json.write_text(json.dumps({"cjk": cjk, "accents": accents}, indent=2))


if __name__ == "__main__":
    main()
