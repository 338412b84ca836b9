"""How often does a cosine threshold call two memories duplicates when one changes a value?

Record merges a new memory into a stored one whose dense cosine reaches
``MEMORY_LONGTERM__NEAR_DUPLICATE_COSINE`` (0.9: docs/decisions.md), unless the
two texts hold different value words (``longterm.near_duplicates.changes_a_value``). This
module measures both halves on the service's embedder:

- **made-up pairs**, one template per kind of change, filled from fixed word lists (names,
  cities, numbers, days, foods, negations, two names or places swapped), each a pair of facts
  that a merge must keep apart, and rewordings (synonym verbs, articles, word order) that it
  should join; ``reordered`` is a rewording that names two people in another order, which
  the guard keeps apart as it does a swap (the safe side: two facts). For each kind:
  the share of pairs at or above each threshold, and the share the service would merge (at
  or above 0.9 and not refused by the guard);
- **LoCoMo observation facts** (``--data``): within each conversation, every pair of facts
  at or above the threshold, how many the guard refuses, and (``--show N``) the first pairs
  of each, to read what a merge would join.

    python -m benchmarks.lab.near_duplicates --data ../shared/data/locomo-dev.json \\
        --json benchmarks/results/lab/near-duplicates.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.lab.common import add_arguments, read_locomo, vector_store
from memory_service.evaluation.datasets.locomo import load_locomo
from memory_service.longterm.near_duplicates import changes_a_value

THRESHOLDS = (0.85, 0.9, 0.95)
SERVICE_COSINE = 0.9

NAMES = ("Alice", "Bob", "Priya", "Tomas", "Mei", "Omar")
CITIES = ("Paris", "Lyon", "Berlin", "Munich", "Seattle", "Portland", "Osaka", "Kyoto")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTHS = ("March", "May", "June", "July", "October", "November")
FOODS = ("tea", "coffee", "rice", "pasta", "sushi", "salad")
COLOURS = ("blue", "green", "red", "yellow", "purple", "orange")

# Each template: the two texts a pair is made of, from a name and two distinct values.
CHANGES: dict[str, tuple[str, str, Sequence[str]]] = {
    "place": ("{n} lives in {a}", "{n} lives in {b}", CITIES),
    "number": ("{n} has {a} dogs", "{n} has {b} dogs", ("2", "3", "4", "5", "6", "7")),
    "age": ("{n} is {a} years old", "{n} is {b} years old", ("29", "30", "31", "34", "35", "41")),
    "weekday": ("{n}'s class is on {a}", "{n}'s class is on {b}", DAYS),
    "month": ("{n}'s birthday is in {a}", "{n}'s birthday is in {b}", MONTHS),
    "name": ("{n}'s sister is called {a}", "{n}'s sister is called {b}", NAMES),
    # lower-case values: no value word, so only the threshold keeps them apart
    "food": ("{n} prefers {a} in the morning", "{n} prefers {b} in the morning", FOODS),
    "colour": ("{n}'s favourite colour is {a}", "{n}'s favourite colour is {b}", COLOURS),
}
NEGATIONS: tuple[tuple[str, str], ...] = (
    ("{n} eats meat", "{n} never eats meat"),
    ("{n} likes jazz", "{n} does not like jazz"),
    ("{n} drinks coffee", "{n} doesn't drink coffee"),
    ("{n} likes crowded places", "{n} dislikes crowded places"),
    ("{n} owns a car", "{n} no longer owns a car"),
    ("{n} is happy at work", "{n} is unhappy at work"),
)
# Two names (or places) swapped: the same words, other roles. Over ordered pairs of names.
SWAPS: tuple[tuple[str, str], ...] = (
    ("{n} owes {m} money", "{m} owes {n} money"),
    ("{n} lent {m} a bike", "{m} lent {n} a bike"),
    ("{n} thanked {m} for the help", "{m} thanked {n} for the help"),
    ("{n} introduced {m} to jazz", "{m} introduced {n} to jazz"),
)
ROUTE = ("{n} moved from {a} to {b}", "{n} moved from {b} to {a}")
# A rewording that names the same people in another order: the guard keeps it apart too
REORDERED = (("{n} and {m} went hiking", "{m} and {n} went hiking"),)
REWORDINGS: tuple[tuple[str, str], ...] = (
    ("{n} likes hiking", "{n} loves hiking"),
    ("{n} enjoys hiking on weekends", "{n} enjoys hiking at weekends"),
    ("{n} went to a pottery class", "{n} attended a pottery class"),
    ("{n} is allergic to peanuts", "{n} has an allergy to peanuts"),
    ("{n} prefers dark mode in every app", "{n} likes dark mode in every app"),
    ("{n} painted a sunrise", "{n} painted a picture of a sunrise"),
    ("{n} plays the guitar", "{n} plays guitar"),
    ("{n} is learning to cook Thai food", "{n} is learning how to cook Thai food"),
)


def made_up_pairs() -> dict[str, list[tuple[str, str]]]:
    """The pairs of each kind: value changes (each template over the names and pairs of
    values), negations and rewordings (over the names)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for kind, (left, right, values) in CHANGES.items():
        out[kind] = [
            (left.format(n=n, a=a), right.format(n=n, b=b))
            for n in NAMES
            for a, b in itertools.combinations(values, 2)
            if n not in (a, b)
        ]
    out["negation"] = [(a.format(n=n), b.format(n=n)) for a, b in NEGATIONS for n in NAMES]
    two = list(itertools.permutations(NAMES, 2))
    out["swap"] = [(a.format(n=n, m=m), b.format(n=n, m=m)) for a, b in SWAPS for n, m in two]
    out["route"] = [
        (ROUTE[0].format(n=n, a=a, b=b), ROUTE[1].format(n=n, a=a, b=b))
        for n in NAMES
        for a, b in itertools.combinations(CITIES, 2)
    ]
    out["rewording"] = [(a.format(n=n), b.format(n=n)) for a, b in REWORDINGS for n in NAMES]
    out["reordered"] = [
        (a.format(n=n, m=m), b.format(n=n, m=m)) for a, b in REORDERED for n, m in two
    ]
    return out


def _cosines(store, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    left = store.embed([a for a, _ in pairs])
    right = store.embed([b for _, b in pairs])
    return np.sum(left * right, axis=1)


def measure_pairs(store) -> dict[str, dict]:
    """Per kind of pair: how many, their cosine median, the share at or above each threshold,
    and the share the service merges (at or above 0.9 and changing no value)."""
    out = {}
    for kind, pairs in made_up_pairs().items():
        cos = _cosines(store, pairs)
        guarded = np.array([not changes_a_value(a, b) for a, b in pairs])
        out[kind] = {
            "pairs": len(pairs),
            "cosine_median": float(np.median(cos)),
            "above": {f"{t:g}": float(np.mean(cos >= t)) for t in THRESHOLDS},
            "merged": float(np.mean((cos >= SERVICE_COSINE) & guarded)),
        }
    return out


def measure_locomo(store, data: Path, show: int) -> dict:
    """Within each LoCoMo conversation's observation facts: the pairs at or above each
    threshold, those the guard refuses at the service's, and examples of both."""
    dataset = load_locomo(read_locomo(data), unit="facts")
    above = dict.fromkeys((f"{t:g}" for t in THRESHOLDS), 0)
    refused, merged_examples, refused_examples, facts = 0, [], [], 0
    for conv in dataset.conversations:
        texts = list(dict.fromkeys(i.text for i in conv.items))
        facts += len(texts)
        vectors = store.embed(texts)
        sims = vectors @ vectors.T
        rows, cols = np.triu_indices(len(texts), k=1)
        for t in THRESHOLDS:
            above[f"{t:g}"] += int(np.sum(sims[rows, cols] >= t))
        for i, j in zip(rows, cols, strict=True):
            if sims[i, j] < SERVICE_COSINE:
                continue
            pair = (round(float(sims[i, j]), 3), texts[i], texts[j])
            if changes_a_value(texts[i], texts[j]):
                refused += 1
                refused_examples.append(pair)
            else:
                merged_examples.append(pair)
    return {
        "facts": facts,
        "pairs_above": above,
        "refused_at_service_cosine": refused,
        "merged_at_service_cosine": len(merged_examples),
        "merged_examples": merged_examples[:show],
        "refused_examples": refused_examples[:show],
    }


def _print_pairs(rows: dict[str, dict]) -> None:
    heads = " / ".join(f">={t:g}" for t in THRESHOLDS)
    print(f"made-up pairs: kind, pairs, median cosine, share {heads}, merged by the service")
    for kind, row in rows.items():
        shares = " / ".join(f"{row['above'][f'{t:g}']:6.1%}" for t in THRESHOLDS)
        print(
            f"  {kind:<10} {row['pairs']:>4}  {row['cosine_median']:.3f}  {shares}  "
            f"{row['merged']:6.1%}"
        )


def _print_locomo(result: dict) -> None:
    above = ", ".join(f">={k}: {v}" for k, v in result["pairs_above"].items())
    print(f"LoCoMo observation facts ({result['facts']}): pairs in one conversation {above}")
    print(
        f"  at >={SERVICE_COSINE:g}: {result['merged_at_service_cosine']} merged, "
        f"{result['refused_at_service_cosine']} refused by the value guard"
    )
    for label in ("merged", "refused"):
        for score, a, b in result[f"{label}_examples"]:
            print(f"  {label:<7} {score:.3f}  {a!r} | {b!r}")


def main(argv: Sequence[str] | None = None, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add_arguments(parser)
    parser.add_argument("--show", type=int, default=10, help="example pairs of each outcome")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    store = vector_store(args, embedder)
    result: dict = {"pairs": measure_pairs(store)}
    _print_pairs(result["pairs"])
    if args.data is not None:
        result["locomo"] = measure_locomo(store, args.data, args.show)
        _print_locomo(result["locomo"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
