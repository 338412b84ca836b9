"""Token counts: the character heuristic against cl100k_base (tiktoken), on conversation turns.

The compaction trigger (75 % of the model's window) and every prompt budget count tokens.
This measures, on each turn of a LoCoMo file (or any JSON list of LoCoMo conversations), how
far the character heuristic (``messages.estimate_tokens``: 4 ASCII characters a token, one per
other character) is from cl100k_base, the encoding the design documents name, and what each
costs per message (median and p95 microseconds, the two counters taking turns message by
message). Also a handful of Chinese and mixed sentences, where the heuristic is weakest.

    python -m benchmarks.latency.token_counting --path ../shared/data/locomo-dev.json
        [--json benchmarks/results/token_counting.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

MIXED = [
    "王小明喜欢吃北京烤鸭，每周五晚上都会去全聚德。",
    "用户对花生过敏，订餐时请务必避开含花生的菜品。",
    "The user moved to 上海 in March 2024 and works at 字节跳动 as an engineer.",
    "会议改到下周三上午十点，地点在三楼 A301 会议室。",
    "Allergies: peanuts 🥜, shellfish 🦐; prefers window seats ✈️.",
]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def turns(path: Path) -> list[str]:
    """Every turn's text of the conversations in ``path``."""
    from memory_service.evaluation.datasets.locomo import iter_turns

    samples = json.loads(path.read_text(encoding="utf-8"))
    return [
        str(t.get("text") or "")
        for sample in samples
        for t in iter_turns(sample.get("conversation") or {})
        if t.get("text")
    ]


def compare(
    texts: Sequence[str], heuristic: Callable[[str], int], exact: Callable[[str], int]
) -> dict:
    """Agreement (heuristic ÷ exact per text, and over all) and time per text of each."""
    ratios, times = [], {"heuristic": [], "cl100k": []}
    total_h = total_x = 0
    for text in texts:
        started = time.perf_counter()
        h = heuristic(text)
        middle = time.perf_counter()
        x = exact(text)
        ended = time.perf_counter()
        times["heuristic"].append((middle - started) * 1e6)
        times["cl100k"].append((ended - middle) * 1e6)
        total_h, total_x = total_h + h, total_x + x
        if x:
            ratios.append(h / x)
    return {
        "texts": len(texts),
        "tokens": {"heuristic": total_h, "cl100k": total_x},
        "ratio_total": round(total_h / total_x, 3) if total_x else None,
        "ratio_p05_p50_p95": [
            round(sorted(ratios)[int(q * (len(ratios) - 1))], 3) for q in (0.05, 0.5, 0.95)
        ]
        if ratios
        else None,
        "us_per_text": {
            name: {"p50": round(statistics.median(v), 2), "p95": round(_p95(v), 2)}
            for name, v in times.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, required=True, help="a LoCoMo JSON file")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)

    from memory_service.domain.messages import estimate_tokens
    from memory_service.domain.tokens import cl100k_tokens

    results = {
        "locomo_turns": compare(turns(args.path), estimate_tokens, cl100k_tokens),
        "chinese_and_mixed": compare(MIXED, estimate_tokens, cl100k_tokens),
    }
    print(
        f"{'texts':<20} {'n':>6} {'heur/cl100k':>12} {'p5/p50/p95':>20} "
        f"{'heur us p50/p95':>18} {'cl100k us p50/p95':>19}"
    )
    for name, r in results.items():
        h, x = r["us_per_text"]["heuristic"], r["us_per_text"]["cl100k"]
        spread = "/".join(str(v) for v in r["ratio_p05_p50_p95"] or [])
        print(
            f"{name:<20} {r['texts']:>6} {r['ratio_total']!s:>12} {spread:>20} "
            f"{h['p50']:>8}/{h['p95']:<9} {x['p50']:>8}/{x['p95']:<10}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
