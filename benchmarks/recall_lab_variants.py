"""The variants measured for issue 6, side by side: what won and what lost (RESULTS.md).

Every row ranks with the service's ``fuse_legs`` on the lab's legs (``recall_lab``) unless the
variant is about something ``fuse_legs`` does not do (BM25 parameters, feedback, MMR, a second
dense key, neighbours looked up outside the candidates); those rows change one thing on top of
the ``hybrid`` preset and say so.

    .venv/bin/python benchmarks/recall_lab_variants.py --unit turns
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_lab import (  # noqa: E402
    Conv,
    Legs,
    Ranker,
    VectorStore,
    all_legs,
    evaluate,
    leg_lists,
    load,
    service_ranker,
)

from indexing.lexical import date_words  # noqa: E402
from indexing.neighbours import smooth_by_session  # noqa: E402
from memory_service.longterm.retrieval import PRESETS, RetrievalConfig, fuse_legs  # noqa: E402

HYBRID = PRESETS["hybrid"]
TOP_K = 25


def _fused(conv: Conv, legs: Legs, row: int, config: RetrievalConfig = HYBRID):
    return fuse_legs("hybrid", leg_lists(conv, legs, row, config.depth(TOP_K)), config, TOP_K * 4)


def configs() -> list[tuple[str, RetrievalConfig]]:
    """Ablation of the winner and the config-level alternatives that lost."""
    z = PRESETS["zscore-plain"]
    return [
        ("rrf-plain (the old default)", PRESETS["rrf-plain"]),
        ("rrf k=5", replace(PRESETS["rrf-plain"], rrf_k=5.0)),
        ("rrf k=60, dense weight 0.5", replace(PRESETS["rrf-plain"], weights=_w(0.5))),
        ("zscore-plain (fusion only)", z),
        ("zscore + date terms", replace(z, date_terms=True)),
        ("zscore + neighbours", replace(z, neighbour_weight=0.5)),
        ("hybrid = zscore + dates + neighbours", HYBRID),
        ("hybrid, dense weight 0.85", replace(HYBRID, weights=_w(0.85))),
        ("hybrid, neighbour window 1", replace(HYBRID, neighbour_window=1)),
        ("hybrid, neighbour window 3", replace(HYBRID, neighbour_window=3)),
        ("hybrid, neighbour weight 0.25", replace(HYBRID, neighbour_weight=0.25)),
        ("hybrid, neighbour weight 0.75", replace(HYBRID, neighbour_weight=0.75)),
        ("hybrid, depth 8x top_k", replace(HYBRID, candidate_multiplier=8)),
        (
            "hybrid, depth 2x top_k (min 25)",
            replace(HYBRID, candidate_multiplier=2, min_candidates=25),
        ),
        ("RRF k=5 + dates + neighbours", replace(HYBRID, fusion="rrf", rrf_k=5.0)),
    ]


def _w(dense: float) -> MappingProxyType:
    return MappingProxyType({"bm25": 1.0, "dense": dense})


# -- variants outside fuse_legs, each one change on top of ``hybrid`` --------------------------


def smoothed_leg(leg: str, legs: dict[str, Legs]) -> Ranker:
    """A single leg with the same neighbour smoothing (is the gain fusion's, or smoothing's?)."""

    def rank(conv: Conv, row: int) -> list[int]:
        hits = leg_lists(conv, legs[conv.id], row, HYBRID.depth(TOP_K))[leg]
        if not hits:
            return []
        scores = np.array([h.score for h in hits])
        z = (scores - scores.mean()) / (scores.std() or 1.0)
        placements = {h.id: (h.session_id, (h.created_at, h.id)) for h in hits}
        out = smooth_by_session(
            {h.id: float(v) for h, v in zip(hits, z, strict=True)},
            placements,
            weight=HYBRID.neighbour_weight,
            window=HYBRID.neighbour_window,
        )
        return [int(i) for i in sorted(out, key=lambda i: -out[i])]

    return rank


def timeline_neighbours(legs: dict[str, Legs]) -> Ranker:
    """Neighbours by the full session timeline (a memory's true previous/next ones, also when
    no leg returned them) instead of among candidates: needs a per-session lookup in Qdrant."""

    def rank(conv: Conv, row: int) -> list[int]:
        plain = fuse_legs(
            "hybrid",
            leg_lists(conv, legs[conv.id], row, HYBRID.depth(TOP_K)),
            replace(HYBRID, neighbour_weight=0.0),
            10**6,
        )
        score = {int(h.id): h.score for h in plain}
        low = min(score.values())
        lifted = np.zeros(len(conv.items))
        for i, s in score.items():
            lifted[i] = s - low
        order = sorted(range(len(conv.items)), key=lambda i: (conv.items[i].created_at, i))
        position = {i: p for p, i in enumerate(order)}
        out = {}
        for i in score:
            p = position[i]
            around = [
                order[q]
                for q in range(max(0, p - 2), min(len(order), p + 3))
                if q != p and conv.items[order[q]].session_id == conv.items[i].session_id
            ]
            best = max((lifted[j] for j in around), default=0.0)
            out[i] = lifted[i] + HYBRID.neighbour_weight * best
        return sorted(out, key=lambda i: -out[i])

    return rank


def dense_feedback(legs: dict[str, Legs], m: int = 3, beta: float = 0.5) -> Ranker:
    """Pseudo-relevance feedback on the dense leg (Rocchio): the query vector moved towards the
    mean of the fused top ``m``, dense re-scored, then fused again."""

    def rank(conv: Conv, row: int) -> list[int]:
        first = [int(h.id) for h in _fused(conv, legs[conv.id], row)[:m]]
        query = conv.query_vectors[row] + beta * conv.doc_vectors[first].mean(axis=0)
        query /= np.linalg.norm(query)
        dense = legs[conv.id].dense.copy()
        dense[row] = conv.doc_vectors @ query
        return [int(h.id) for h in _fused(conv, Legs(legs[conv.id].bm25, dense), row)]

    return rank


def mmr(legs: dict[str, Legs], lam: float = 0.8) -> Ranker:
    """Maximal marginal relevance over the fused list (cosine between memories)."""

    def rank(conv: Conv, row: int) -> list[int]:
        fused = _fused(conv, legs[conv.id], row)
        ids = [int(h.id) for h in fused]
        if not ids:
            return []
        s = np.array([h.score for h in fused])
        s = (s - s.min()) / ((s.max() - s.min()) or 1.0)
        sim = conv.doc_vectors[ids] @ conv.doc_vectors[ids].T
        chosen, rest = [0], list(range(1, len(ids)))
        while rest and len(chosen) < TOP_K:
            best = max(rest, key=lambda j: lam * s[j] - (1 - lam) * sim[j, chosen].max())
            chosen.append(best)
            rest.remove(best)
        return [ids[j] for j in chosen]

    return rank


def second_dense_key(convs: Sequence[Conv], legs: dict[str, Legs], key: str) -> Ranker:
    """Each memory also embedded as ``date: text`` or ``previous turn + text``; its dense score
    is the better of its two keys."""
    store = VectorStore()
    replaced = {}
    for conv in convs:
        order = sorted(range(len(conv.items)), key=lambda i: (conv.items[i].created_at, i))
        previous = {b: a for a, b in zip(order, order[1:], strict=False)}
        texts = []
        for i, item in enumerate(conv.items):
            if key == "dated" and item.created_at is not None:
                texts.append(f"{date_words(item.created_at)}: {item.text}")
            elif key == "context" and i in previous:
                texts.append(f"{conv.items[previous[i]].text} {item.text}")
            else:
                texts.append(item.text)
        extra = conv.query_vectors @ store.embed(texts).T
        replaced[conv.id] = Legs(legs[conv.id].bm25, np.maximum(legs[conv.id].dense, extra))
    return service_ranker(HYBRID, replaced)


def bm25_params(convs: Sequence[Conv], k1: float, b: float) -> Ranker:
    """BM25 k1/b other than 1.2/0.75 (baked into Qdrant's stored vectors: a re-index)."""
    legs = {c.id: Legs(c.bm25(k1=k1, b=b, date_terms=True), c.dense()) for c in convs}
    return service_ranker(HYBRID, legs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unit", default="turns", choices=("turns", "facts"))
    args = parser.parse_args(argv)
    convs = load(args.unit)
    legs = {dates: all_legs(convs, date_terms=dates) for dates in (False, True)}

    def show(name: str, ranker: Ranker) -> None:
        print(f"  {name:44s} {evaluate(convs, ranker).row()}", flush=True)

    print(f"{args.unit}: R@5 / R@10 / R@25, MRR (hybrid mode unless named)")
    for leg in ("bm25", "dense"):
        show(f"{leg} leg, no dates", service_ranker(HYBRID, legs[False], mode=leg))
        show(f"{leg} leg, with dates", service_ranker(HYBRID, legs[True], mode=leg))
        show(f"{leg} leg + neighbour smoothing", smoothed_leg(leg, legs[True]))
    for name, config in configs():
        show(name, service_ranker(config, legs[config.date_terms]))
    others: list[tuple[str, Callable[[], Ranker]]] = [
        ("hybrid, neighbours from the session timeline", lambda: timeline_neighbours(legs[True])),
        ("hybrid + dense feedback (m=3, beta=0.5)", lambda: dense_feedback(legs[True])),
        ("hybrid + MMR (lambda=0.8)", lambda: mmr(legs[True])),
        (
            "hybrid + second dense key 'date: text'",
            lambda: second_dense_key(convs, legs[True], "dated"),
        ),
        (
            "hybrid + second dense key 'prev + text'",
            lambda: second_dense_key(convs, legs[True], "context"),
        ),
        ("hybrid, BM25 k1=0.9 b=0.4", lambda: bm25_params(convs, 0.9, 0.4)),
        ("hybrid, BM25 k1=1.2 b=0.3", lambda: bm25_params(convs, 1.2, 0.3)),
    ]
    for name, make in others:
        show(name, make())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
