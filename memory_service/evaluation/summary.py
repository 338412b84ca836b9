"""Turn a run's outcomes into the result document: per mode, per category, legs compared.

The document is what ``--json`` writes and what the tables print, so both always agree.
Rates are fractions (0.61), latencies milliseconds. A baseline (hybrid on a second backend with
another preset) gets a result row like a mode, but is never a leg nor "hybrid" in the legs table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from memory_service.evaluation import metrics
from memory_service.evaluation.runner import Outcome, RunResult

NDCG_K = 10


def _by_k(outcomes: Sequence[Outcome], ks: Sequence[int], fn: Callable) -> dict[str, float]:
    return {str(k): metrics.mean([fn(o.ranked, o.gold, k) for o in outcomes]) for k in ks}


def _scores(outcomes: Sequence[Outcome], ks: Sequence[int]) -> dict:
    return {
        "questions": len(outcomes),
        "recall": _by_k(outcomes, ks, metrics.recall_at_k),
        "recall_all": _by_k(outcomes, ks, metrics.recall_all_at_k),
        "recall_any": _by_k(outcomes, ks, metrics.recall_any_at_k),
        "mrr": metrics.mean([metrics.reciprocal_rank(o.ranked, o.gold) for o in outcomes]),
        f"ndcg@{NDCG_K}": metrics.mean(
            [metrics.ndcg_at_k(o.ranked, o.gold, NDCG_K) for o in outcomes]
        ),
    }


def _stale(outcomes: Sequence[Outcome], depth: int) -> dict | None:
    """Share of questions with an outdated memory anywhere in the retrieved list."""
    with_stale = [o for o in outcomes if o.stale]
    if not with_stale:
        return None
    hits = [float(any(o.stale.intersection(refs) for refs in o.ranked)) for o in with_stale]
    return {"questions": len(with_stale), "at_k": depth, "rate": metrics.mean(hits)}


def _latency(outcomes: Sequence[Outcome]) -> dict:
    values = [o.latency_ms for o in outcomes]
    return {
        "p50": metrics.percentile(values, 50),
        "p95": metrics.percentile(values, 95),
        "mean": metrics.mean(values),
    }


def categories_in(run: RunResult) -> list[str]:
    seen = {o.category for o in run.outcomes}
    ordered = [c for c in run.dataset.categories if c in seen]
    return ordered + sorted(seen - set(ordered))


def _mode_result(run: RunResult, mode: str, ks: Sequence[int], categories: list[str]) -> dict:
    outcomes = [o for o in run.outcomes if o.mode == mode]
    by_category: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_category[o.category].append(o)
    result = {"mode": mode, **_scores(outcomes, ks)}
    result["latency_ms"] = _latency(outcomes)
    result["ingest_per_s"] = run.ingest_per_s if mode in run.modes else None  # baseline: untimed
    if (stale := _stale(outcomes, run.depth)) is not None:
        result["stale"] = stale
    if len(categories) > 1:
        result["categories"] = {c: _scores(by_category[c], ks) for c in categories}
    return result


def compare_legs(run: RunResult, ks: Sequence[int], categories: list[str]) -> dict | None:
    """Per question, which leg recalls more at each k; the best-leg oracle (an upper bound for
    choosing a leg per question); how often hybrid falls below the better leg."""
    by_question: dict[str, dict[str, Outcome]] = defaultdict(dict)
    for o in run.outcomes:
        if o.mode in run.modes:  # the baseline row is neither a leg nor the run's hybrid
            by_question[o.qid][o.mode] = o
    if not {"bm25", "dense"} <= set(run.modes):
        return None
    out: dict = {"k": {}, "categories": {}}
    groups = {"all": list(by_question.values())}
    if len(categories) > 1:
        for c in categories:
            groups[c] = [q for q in by_question.values() if q["bm25"].category == c]
    for group, questions in groups.items():
        per_k = {}
        for k in ks:
            names = ["bm25_better", "dense_better", "tie", "neither_leg_hits"]
            if "hybrid" in run.modes:
                names += ["hybrid_below_best_leg", "hybrid_above_best_leg"]
            counts = dict.fromkeys(names, 0)
            oracle = []
            for q in questions:
                bm25 = metrics.recall_at_k(q["bm25"].ranked, q["bm25"].gold, k)
                dense = metrics.recall_at_k(q["dense"].ranked, q["dense"].gold, k)
                best = max(bm25, dense)
                oracle.append(best)
                counts[
                    "bm25_better" if bm25 > dense else "dense_better" if dense > bm25 else "tie"
                ] += 1
                counts["neither_leg_hits"] += best == 0.0
                if "hybrid" in q:
                    hybrid = metrics.recall_at_k(q["hybrid"].ranked, q["hybrid"].gold, k)
                    counts["hybrid_below_best_leg"] += hybrid < best
                    counts["hybrid_above_best_leg"] += hybrid > best
            per_k[str(k)] = {"questions": len(questions), "best_leg_oracle": metrics.mean(oracle)}
            per_k[str(k)].update(counts)
        if group == "all":
            out["k"] = per_k
        else:
            out["categories"][group] = per_k
    if not out["categories"]:
        del out["categories"]
    return out


def _details(run: RunResult, ks: Sequence[int]) -> list[dict]:
    rows: dict[str, dict] = {}
    for o in run.outcomes:
        row = rows.setdefault(
            o.qid, {"qid": o.qid, "category": o.category, "gold": len(o.gold), "modes": {}}
        )
        row["modes"][o.mode] = {
            "first_hit": metrics.first_hit_rank(o.ranked, o.gold),
            "recall": {str(k): metrics.recall_at_k(o.ranked, o.gold, k) for k in ks},
            "latency_ms": round(o.latency_ms, 3),
        }
    return list(rows.values())


def summarise(run: RunResult, ks: Sequence[int], *, details: bool = False) -> dict:
    """The result document (without run metadata, which the caller adds)."""
    categories = categories_in(run)
    skipped = dict(run.dataset.skipped + run.skipped)
    notes = dict(+run.dataset.notes)
    if run.unreachable_gold:
        notes["gold ids no memory carries (unreachable)"] = run.unreachable_gold
        notes["questions with unreachable gold ids"] = run.questions_with_unreachable_gold
    asked = {o.qid for o in run.outcomes}
    doc: dict = {
        "dataset": run.dataset.name,
        "unit": run.dataset.unit,
        "k": list(ks),
        "depth": run.depth,
        "memories": len({c.id for c in run.dataset.conversations if c.questions}),
        "questions": len(asked),
        "items_recorded": run.items_recorded,
        "facts_stored": run.facts_stored,
        "skipped": skipped,
        "notes": notes,
        "ingest": {
            "items": run.items_recorded,
            "record_s": run.record_s,
            "per_s": run.ingest_per_s,
            "index_build_ms": {
                "p50": metrics.percentile(run.index_build_ms, 50),
                "p95": metrics.percentile(run.index_build_ms, 95),
            },
        },
        "categories": categories,
        "results": [_mode_result(run, label, ks, categories) for label in run.labels],
        "wall_s": run.wall_s,
    }
    if run.query_embedding_ms:
        doc["query_embedding_ms"] = {
            "p50": metrics.percentile(run.query_embedding_ms, 50),
            "p95": metrics.percentile(run.query_embedding_ms, 95),
        }
    if run.reachable:
        doc["recall_ceiling"] = metrics.mean(list(run.reachable.values()))
    if run.baseline_preset is not None:  # the first: the latency target's
        doc["baseline"] = {"preset": run.baseline_preset, "mode": run.baseline_mode}
        doc["baselines"] = [
            {"preset": p, "mode": m}
            for p, m in zip(run.baseline_presets, run.baseline_modes, strict=True)
        ]
    if (legs := compare_legs(run, ks, categories)) is not None:
        doc["legs"] = legs
    if run.injection is not None:
        doc["injection"] = run.injection.summary()
    if details:
        doc["per_question"] = _details(run, ks)
    return doc
