"""The redaction detector on two corpora: precision and recall per kind, false positives on
hard negatives, and time per sentence.

Two corpora, each seeded (the same sentences every run): ``generated`` (``corpus.py``, the
values made here, the one the rules were written against) and ``faker`` (``faker_corpus.py``,
the values made by Faker, a generator this project did not write, in sentences of eight
locales). ``--corpus`` picks one or ``both`` (the default), each its own table. A
positive counts as found when a finding of its kind covers the whole value (the digits of a
card, the value of a ``password:`` pair, a private key's whole block); a finding of another
kind, or a finding on a negative, is a false positive of the kind it claims. Time is
``memory_service.domain.redaction.redact_text`` per sentence, after one warm-up pass.

``--locomo PATH`` adds real conversation: every turn of a LoCoMo file (it holds no card or
secret), timed the same way, and the turns anything was found in (each one a false positive
unless it really holds a value).

    python -m benchmarks.privacy.redaction [--corpus both] [--positives 1200] \
        [--negatives 1200] [--seed N] [--locomo ../shared/data/locomo-dev.json] \
        [--json benchmarks/results/redaction.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from stdnum import luhn

from benchmarks.privacy import faker_corpus
from benchmarks.privacy.corpus import SEED, Sample, corpus
from memory_service.domain.redaction import KINDS, find, redact_text

TARGETS = {"card": 0.99, "iban": 0.99, "national-id": 0.99, "secret": 0.95}
CORPORA = {"generated": (corpus, SEED), "faker": (faker_corpus.corpus, faker_corpus.SEED)}
MAX_FALSE_POSITIVE_RATE = 0.01
_CARD_LENGTH_RUN = re.compile(r"(?<![0-9])[0-9]{12,19}(?![0-9])")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def _covers(sample: Sample, start: int, end: int) -> bool:
    at = sample.text.find(sample.value)
    return at >= 0 and start <= at and end >= at + len(sample.value)


def evaluate(samples: Sequence[Sample]) -> dict:
    """Per kind: true positives, false negatives, false positives, precision, recall; the
    negatives' false-positive rate (sentences with any finding) by family; time per sentence."""
    tp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    by_family: dict[str, Counter[str]] = {}
    fp: Counter[str] = Counter()
    flagged: Counter[str] = Counter()
    negatives: Counter[str] = Counter()
    missed: list[dict] = []
    false_alarms: list[dict] = []
    for sample in samples:
        findings = find(sample.text)
        if sample.kind == "none":
            negatives[sample.family] += 1
            if findings:
                flagged[sample.family] += 1
                fp.update(f.kind for f in findings)
                false_alarms.append({"text": sample.text, "kinds": [f.kind for f in findings]})
            continue
        hit = next(
            (f for f in findings if f.kind == sample.kind and _covers(sample, f.start, f.end)),
            None,
        )
        by_family.setdefault(sample.family, Counter())["hit" if hit else "miss"] += 1
        if hit is None:
            fn[sample.kind] += 1
            missed.append({"family": sample.family, "text": sample.text})
        else:
            tp[sample.kind] += 1
        fp.update(f.kind for f in findings if f is not hit)
    timings = []
    texts = [s.text for s in samples]
    for text in texts:  # warm-up: compiled patterns, stdnum's registry files
        redact_text(text)
    for text in texts:
        began = time.perf_counter()
        redact_text(text)
        timings.append((time.perf_counter() - began) * 1e6)
    kinds = {}
    for kind in KINDS:
        found, lost, wrong = tp[kind], fn[kind], fp[kind]
        kinds[kind] = {
            "positives": found + lost,
            "tp": found,
            "fn": lost,
            "fp": wrong,
            "precision": round(found / (found + wrong), 4) if found + wrong else None,
            "recall": round(found / (found + lost), 4) if found + lost else None,
            "recall_target": TARGETS[kind],
        }
    n_neg = sum(negatives.values())
    luhn_lookalikes = sum(
        any(luhn.is_valid(run) for run in _CARD_LENGTH_RUN.findall(s.text))
        for s in samples
        if s.kind == "none"
    )
    return {
        "sentences": len(samples),
        "positives": len(samples) - n_neg,
        "negatives": n_neg,
        "kinds": kinds,
        "recall_by_family": {
            family: round(c["hit"] / (c["hit"] + c["miss"]), 4)
            for family, c in sorted(by_family.items())
        },
        "false_positive_rate": round(sum(flagged.values()) / n_neg, 4) if n_neg else None,
        "negatives_with_a_luhn_valid_number": luhn_lookalikes,
        "false_positives_by_family": {f: flagged[f] for f in sorted(negatives)},
        "us_per_sentence": {
            "median": round(statistics.median(timings), 1),
            "p95": round(_p95(timings), 1),
        },
        "missed": missed[:20],
        "false_alarms": false_alarms[:20],
    }


def conversation(path: Path) -> dict:
    """Time per turn and the turns with a finding, over a LoCoMo file's turns."""
    from memory_service.evaluation.datasets.locomo import iter_turns

    samples = json.loads(path.read_text(encoding="utf-8"))
    turns = [
        str(t.get("text") or "")
        for sample in samples
        for t in iter_turns(sample.get("conversation") or {})
        if t.get("text")
    ]
    for turn in turns:
        redact_text(turn)
    timings, flagged = [], []
    for turn in turns:
        began = time.perf_counter()
        _, found = redact_text(turn)
        timings.append((time.perf_counter() - began) * 1e6)
        if found:
            flagged.append({"text": turn, "kinds": dict(found)})
    return {
        "turns": len(turns),
        "flagged": len(flagged),
        "flagged_turns": flagged[:20],
        "us_per_turn": {
            "median": round(statistics.median(timings), 1),
            "p95": round(_p95(timings), 1),
        },
    }


def table(result: dict, name: str = "") -> str:
    lines = [f"{name} corpus, seed {result.get('seed')}:", ""] if name else []
    lines += [
        "| kind | positives | recall | precision | target recall |",
        "|---|---|---|---|---|",
    ]
    for kind, row in result["kinds"].items():
        lines.append(
            f"| {kind} | {row['positives']} | {row['recall']} | {row['precision']} | "
            f"≥ {row['recall_target']} |"
        )
    us = result["us_per_sentence"]
    lines.append("")
    lines.append(
        "recall by family: " + ", ".join(f"{f} {r}" for f, r in result["recall_by_family"].items())
    )
    lines.append(
        f"false positives: {result['false_positive_rate']:.2%} of {result['negatives']} "
        f"hard negatives (target ≤ {MAX_FALSE_POSITIVE_RATE:.0%}); by family: "
        + ", ".join(f"{f} {n}" for f, n in result["false_positives_by_family"].items())
    )
    lines.append(
        f"negatives holding a Luhn-valid run of 12-19 digits: "
        f"{result['negatives_with_a_luhn_valid_number']}"
    )
    lines.append(f"time per sentence: median {us['median']} µs, p95 {us['p95']} µs")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", choices=[*CORPORA, "both"], default="both")
    parser.add_argument("--positives", type=int, default=1200)
    parser.add_argument("--negatives", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=None, help="each corpus's own by default")
    parser.add_argument("--locomo", type=Path, default=None, help="a LoCoMo file's turns too")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args(argv)
    names = list(CORPORA) if args.corpus == "both" else [args.corpus]
    results: dict = {}
    for name in names:
        make, seed = CORPORA[name]
        seed = seed if args.seed is None else args.seed
        result = evaluate(make(args.positives, args.negatives, seed))
        result["seed"] = seed
        results[name] = result
        print(table(result, name))
        for miss in result["missed"][:20]:
            print("missed:", miss)
        for alarm in result["false_alarms"][:10]:
            print("false alarm:", alarm)
        print()
    if args.locomo is not None:
        real = results["locomo"] = conversation(args.locomo)
        for turn in real["flagged_turns"][:5]:
            print("LoCoMo turn with a finding:", turn)
        us = real["us_per_turn"]
        print(
            f"LoCoMo turns: {real['flagged']} of {real['turns']} with a finding; "
            f"time per turn: median {us['median']} µs, p95 {us['p95']} µs"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
