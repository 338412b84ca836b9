"""Which stemmer the lexical leg should use: a light hand-written one, Snowball (the default)
or Krovetz (KStem, the light English stemmer of Lucene and Elasticsearch).

Each stemmer replaces ``indexing.tokenize.stem`` for both documents and queries and the default
preset is scored on each set, with hybrid recall@10 per conversation (a stemmer that helps one
conversation and hurts another shows here) and the dev targets the default has to keep
(``fusion_frontier.verdicts``). What it found, and why Snowball is the default: RESULTS.md,
"Stemming".
Krovetz needs ``pip install krovetzstemmer`` (not a dependency of the
service).

    python -m benchmarks.lab.stemming --data ../shared/data/locomo-dev.json \
        --stemmers light,snowball,krovetz --json benchmarks/results/stemmers.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import indexing.tokenize as tokenize_module
from benchmarks.lab.common import SETS, add_arguments, sets_of, table
from benchmarks.lab.fusion_frontier import verdicts
from memory_service.config.retrieval import PRESETS

_VOWELS = set("aeiouy")


def light_stem(word: str) -> str:
    """A light English stemmer (plurals, -ing, -ed, -ly, -ies), the simplest rule set worth
    measuring against Snowball."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ingly", "edly", "ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            root = word[: -len(suffix)]
            if not _VOWELS.intersection(root):
                return word
            if len(root) >= 4 and root[-1] == root[-2] and root[-1] not in "lsz":
                root = root[:-1]  # running -> run, stopped -> stop
            return root
    if word.endswith("ly") and len(word) > 5:
        return word[:-2]
    return word


def krovetz() -> Callable[[str], str]:
    try:
        from krovetzstemmer import Stemmer
    except ImportError:
        raise SystemExit(
            "krovetz needs: pip install krovetzstemmer (not a service dependency)"
        ) from None
    stemmer = Stemmer()

    @lru_cache(maxsize=65536)
    def stem(word: str) -> str:  # the same guards as ``indexing.tokenize.stem``
        if word.endswith("'s"):
            word = word[:-2]
        if not word.isascii() or not word.isalpha():
            return word
        return stemmer.stem(word)

    return stem


def stemmer(name: str) -> Callable[[str], str]:
    if name == "light":
        return light_stem
    if name == "snowball":
        return tokenize_module.stem
    if name == "krovetz":
        return krovetz()
    raise SystemExit(f"unknown stemmer {name!r}: light, snowball or krovetz")


def compare(sets, names: Sequence[str], *, legs: str = "service") -> dict:
    """Scores of the default preset with each stemmer, printed and returned by stemmer."""
    snowball = tokenize_module.stem
    chosen = {name: stemmer(name) for name in names}
    out = {}
    try:
        for label, stem in chosen.items():
            tokenize_module.stem = stem
            print(f"\n=== {label}: {tokenize_module.tokenize('living lives dancing dance')}")
            scores = table(sets, [PRESETS["hybrid"]], ("bm25", "dense", "hybrid"), legs=legs)
            by_set = {name: by_config["hybrid"] for name, by_config in scores.items()}
            hybrid = {name: by_mode["hybrid"] for name, by_mode in by_set.items()}
            out[label] = {
                "rows": {n: {m: s.percent() for m, s in by.items()} for n, by in by_set.items()},
                "hybrid_r10_per_conversation": {
                    n: {c: round(100 * r[10], 1) for c, r in s.per_conv.items()}
                    for n, s in hybrid.items()
                },
            }
            for name, per in out[label]["hybrid_r10_per_conversation"].items():
                print(f"  {name:13s} hybrid R@10 per conversation {per}")
            if set(SETS) <= set(sets):
                singles = {
                    n: {m: s for m, s in by.items() if m != "hybrid"} for n, by in by_set.items()
                }
                out[label]["targets"] = verdicts(hybrid, singles)
                print(f"  targets: {out[label]['targets']}", flush=True)
    finally:
        tokenize_module.stem = snowball
    return out


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, sets=",".join(SETS))
    parser.add_argument("--stemmers", default="light,snowball", help="light, snowball, krovetz")
    parser.add_argument("--legs", default="service", choices=("service", "lab"))
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    result = compare(sets_of(args, embedder), args.stemmers.split(","), legs=args.legs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
