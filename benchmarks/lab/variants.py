"""Which retrieval variants beat the ``hybrid`` preset on LoCoMo, and which lose: the ablation
of the default and every alternative measured against it, one table.

Every row ranks with the service's ``fuse_legs`` on the lab's legs (the text and day indexed;
``benchmarks.lab.common``) unless the variant is about something ``fuse_legs`` does not do (BM25
parameters, feedback, MMR, a second dense key, neighbours looked up outside the candidates, a
MaxSim leg); those rows change one thing on top of ``hybrid`` and say so. The default is what
won: z-score fusion with date terms and session neighbours (turns 65.7 / 75.1 / 82.4 against
plain RRF's 49.4 / 57.7 / 67.0 on these legs), and no cheaper row beats it on both units
(RESULTS.md, "Fusion and neighbours" and "What lost").

    python -m benchmarks.lab.variants --data ../shared/data/locomo-dev.json --unit turns
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks.lab.common import (
    Conv,
    Legs,
    Ranker,
    VectorStore,
    add_arguments,
    all_legs,
    evaluate,
    leg_lists,
    load,
    ranker,
    read_locomo,
    vector_store,
)
from benchmarks.lab.late_interaction import (
    maxsim_alone,
    maxsim_ranker,
    maxsim_scores,
    token_vectors,
)
from indexing.bm25 import BM25Index
from indexing.lexical import date_words, lexical_terms
from indexing.neighbours import smooth_by_session
from indexing.tokenize import tokenize
from memory_service.config.retrieval import PRESETS, RetrievalConfig
from memory_service.evaluation.datasets.locomo import iter_sessions, turn_text
from memory_service.longterm.fusion import fuse_legs

HYBRID = PRESETS["hybrid"]
TOP_K = 25


def _fused(conv: Conv, legs: Legs, row: int, config: RetrievalConfig = HYBRID):
    return fuse_legs("hybrid", leg_lists(conv, legs, row, config.depth(TOP_K)), config, TOP_K * 4)


def configs() -> list[tuple[str, RetrievalConfig]]:
    """Ablation of the winner and the config-level alternatives that lost."""
    z = PRESETS["zscore-plain"]
    return [
        ("rrf-plain (plain RRF, no dates or neighbours)", PRESETS["rrf-plain"]),
        ("rrf k=5", PRESETS["rrf-plain"].with_changes(rrf_k=5.0)),
        ("rrf k=60, dense weight 0.5", PRESETS["rrf-plain"].with_changes(weights=_w(0.5))),
        ("zscore-plain (fusion only)", z),
        ("zscore + date terms", z.with_changes(date_terms=True)),
        ("zscore + neighbours", z.with_changes(neighbour_weight=0.5)),
        ("hybrid = zscore + dates + neighbours", HYBRID),
        ("hybrid, dense weight 0.85", HYBRID.with_changes(weights=_w(0.85))),
        ("hybrid, neighbour window 1", HYBRID.with_changes(neighbour_window=1)),
        ("hybrid, neighbour window 3", HYBRID.with_changes(neighbour_window=3)),
        ("hybrid, neighbour weight 0.25", HYBRID.with_changes(neighbour_weight=0.25)),
        ("hybrid, neighbour weight 0.75", HYBRID.with_changes(neighbour_weight=0.75)),
        ("hybrid, depth 8x top_k", HYBRID.with_changes(candidate_multiplier=8)),
        (
            "hybrid, depth 2x top_k (min 25)",
            HYBRID.with_changes(candidate_multiplier=2, min_candidates=25),
        ),
        ("RRF k=5 + dates + neighbours", HYBRID.with_changes(fusion="rrf", rrf_k=5.0)),
    ]


def _w(dense: float) -> dict[str, float]:
    return {"bm25": 1.0, "dense": dense}


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
            HYBRID.with_changes(neighbour_weight=0.0),
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


def second_dense_key(
    convs: Sequence[Conv], legs: dict[str, Legs], key: str, store: VectorStore
) -> Ranker:
    """Each memory also embedded as ``date: text`` or ``previous turn + text``; its dense score
    is the better of its two keys."""
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
    return ranker(HYBRID, replaced)


def bm25_params(convs: Sequence[Conv], k1: float, b: float) -> Ranker:
    """BM25 k1/b other than 1.2/0.75 (baked into Qdrant's stored vectors: a re-index)."""
    legs = {c.id: Legs(c.bm25(k1=k1, b=b, date_terms=True), c.dense()) for c in convs}
    return ranker(HYBRID, legs)


def bigrams(convs: Sequence[Conv], legs: dict[str, Legs]) -> Ranker:
    """The lexical leg also indexes adjacent word pairs ("homeless_shelter"), documents and
    queries alike: phrase matches count more than two loose words."""

    def pairs(terms: list[str]) -> list[str]:
        return terms + [f"{a}_{b}" for a, b in zip(terms, terms[1:], strict=False)]

    replaced = {}
    for conv in convs:
        bm25 = conv.bm25(
            doc_tokens=lambda i, conv=conv: (
                pairs(tokenize(conv.items[i].text))
                + lexical_terms("", conv.items[i].created_at, with_date=True)
            ),
            query_tokens=lambda q: pairs(tokenize(q)),
        )
        replaced[conv.id] = Legs(bm25, legs[conv.id].dense)
    return ranker(HYBRID, replaced)


def lexical_feedback(
    convs: Sequence[Conv], legs: dict[str, Legs], m: int = 3, terms: int = 10, beta: float = 0.3
) -> Ranker:
    """Pseudo-relevance feedback on the lexical leg (RM3-like): the ``terms`` best new terms of
    the fused top ``m`` (tf x idf) added to the BM25 query with total weight ``beta``, then
    fused again."""
    replaced = {}
    for conv in convs:
        docs = [lexical_terms(it.text, it.created_at, with_date=True) for it in conv.items]
        index = BM25Index(docs)
        df = Counter(t for d in docs for t in set(d))
        bm25 = legs[conv.id].bm25.copy()
        for row, question in enumerate(conv.questions):
            asked = set(tokenize(question))
            weight: Counter[str] = Counter()
            for i in [int(h.id) for h in _fused(conv, legs[conv.id], row)[:m]]:
                for term, n in Counter(docs[i]).items():
                    if term not in asked:
                        weight[term] += n / len(docs[i]) * math.log(1 + len(docs) / df[term])
            chosen = [t for t, _ in weight.most_common(terms)]
            if not chosen:
                continue
            total = sum(weight[t] for t in chosen)
            extra = sum(weight[t] / total * index.scores([t]) for t in chosen)
            matched = np.isfinite(bm25[row]) | (extra > 0)
            lifted = np.where(np.isfinite(bm25[row]), bm25[row], 0.0) + beta * len(chosen) * extra
            bm25[row] = np.where(matched, lifted, -np.inf)
        replaced[conv.id] = Legs(bm25, legs[conv.id].dense)
    return ranker(HYBRID, replaced)


def session_prior(convs: Sequence[Conv], legs: dict[str, Legs], gamma: float = 0.25) -> Ranker:
    """Cluster-based retrieval: each session scored as one document (its memories' words for
    BM25, their mean vector for dense), and a memory's fused score (scaled to unit spread)
    plus ``gamma`` x its session's summed z-scores."""

    def z(x: np.ndarray) -> np.ndarray:
        return (x - x.mean()) / x.std() if x.std() > 1e-12 else np.zeros_like(x)

    prior: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for conv in convs:
        sessions = sorted({it.session_id or "" for it in conv.items})
        member = np.array([sessions.index(it.session_id or "") for it in conv.items])
        words: list[list[str]] = [[] for _ in sessions]
        for it, s in zip(conv.items, member, strict=True):
            words[s] += tokenize(it.text)
        index = BM25Index(words)
        mean = np.stack([conv.doc_vectors[member == s].mean(axis=0) for s in range(len(words))])
        mean /= np.linalg.norm(mean, axis=1, keepdims=True)
        lexical = np.stack([index.scores(tokenize(q)) for q in conv.questions])
        dense = conv.query_vectors @ mean.T
        prior[conv.id] = (
            member,
            np.stack([z(a) + z(b) for a, b in zip(lexical, dense, strict=True)]),
        )

    def rank(conv: Conv, row: int) -> list[int]:
        fused = _fused(conv, legs[conv.id], row)
        member, by_session = prior[conv.id]
        spread = float(np.std([h.score for h in fused])) or 1.0
        score = {
            int(h.id): h.score / spread + gamma * by_session[row][member[int(h.id)]] for h in fused
        }
        return sorted(score, key=lambda i: -score[i])

    return rank


def _source_turns(conv: Conv, samples: list) -> list[str]:
    """Facts only: the text of the dialog turn(s) each fact was written from (its provenance)."""
    sample = next(s for s in samples if s.get("sample_id") == conv.id)
    said = {}
    for _, turns in iter_sessions(sample.get("conversation") or {}):
        for turn in turns:
            said[str(turn.get("dia_id", "")).strip()] = turn_text(turn, "speaker")
    return [" ".join(said.get(r, "") for r in sorted(refs)) for refs in conv.refs]


def provenance_keys(
    convs: Sequence[Conv],
    legs: dict[str, Legs],
    where: str,
    store: VectorStore,
    samples: list,
) -> Ranker:
    """Facts only: each fact also keyed by the message it was extracted from, in the lexical
    leg (``lex``), as a second dense key (``dense``, max of both) or both."""
    replaced = {}
    for conv in convs:
        source = _source_turns(conv, samples)
        bm25, dense = legs[conv.id].bm25, legs[conv.id].dense
        if where in ("lex", "both"):
            bm25 = conv.bm25(
                doc_tokens=lambda i, conv=conv, source=source: lexical_terms(
                    f"{conv.items[i].text} {source[i]}", conv.items[i].created_at, with_date=True
                )
            )
        if where in ("dense", "both"):
            keys = [s or it.text for s, it in zip(source, conv.items, strict=True)]
            dense = np.maximum(dense, conv.query_vectors @ store.embed(keys).T)
        replaced[conv.id] = Legs(bm25, dense)
    return ranker(HYBRID, replaced)


def source_turn_order(convs: Sequence[Conv]) -> Ranker:
    """Facts only: each fact stamped at its source turn (session start + turn number seconds)
    instead of grouped by speaker, so neighbour smoothing sees conversational order."""
    restamped = []
    for conv in convs:
        items = []
        for item, refs in zip(conv.items, conv.refs, strict=True):
            turns = [int(m.group(1)) for r in refs if (m := re.fullmatch(r"D\d+:(\d+)", r))]
            if turns and item.created_at is not None:
                start = item.created_at.replace(second=0)
                item = replace(item, created_at=start + timedelta(seconds=min(turns)))
            items.append(item)
        restamped.append(replace(conv, items=items))
    legs = all_legs(restamped, date_terms=True)
    by_id = {c.id: c for c in restamped}

    def rank(conv: Conv, row: int) -> list[int]:
        return ranker(HYBRID, legs)(by_id[conv.id], row)

    return rank


def rows(
    convs: Sequence[Conv],
    unit: str,
    store: VectorStore,
    samples: list,
    cache: Path,
    embedder=None,
) -> list[tuple[str, Callable[[], Ranker]]]:
    """Every row of the table as (name, a function making its ranker), in print order."""
    legs = {dates: all_legs(convs, date_terms=dates) for dates in (False, True)}
    dated = legs[True]
    out: list[tuple[str, Callable[[], Ranker]]] = []
    for leg in ("bm25", "dense"):
        out += [
            (f"{leg} leg, no dates", partial(ranker, HYBRID, legs[False], leg)),
            (f"{leg} leg, with dates", partial(ranker, HYBRID, dated, leg)),
            (f"{leg} leg + neighbour smoothing", partial(smoothed_leg, leg, dated)),
        ]
    for name, config in configs():
        out.append((name, partial(ranker, config, legs[config.date_terms])))

    def tokens():
        return token_vectors(convs, unit, cache, embedder)

    def maxsim(replace_dense: bool) -> Ranker:
        return maxsim_ranker(dated, maxsim_scores(convs, tokens()), replace_dense=replace_dense)

    out += [
        ("hybrid, neighbours from the session timeline", lambda: timeline_neighbours(dated)),
        ("hybrid + dense feedback (m=3, beta=0.5)", lambda: dense_feedback(dated)),
        ("hybrid + MMR (lambda=0.8)", lambda: mmr(dated)),
        (
            "hybrid + second dense key 'date: text'",
            lambda: second_dense_key(convs, dated, "dated", store),
        ),
        (
            "hybrid + second dense key 'prev + text'",
            lambda: second_dense_key(convs, dated, "context", store),
        ),
        ("hybrid, BM25 k1=0.9 b=0.4", lambda: bm25_params(convs, 0.9, 0.4)),
        ("hybrid, BM25 k1=1.2 b=0.3", lambda: bm25_params(convs, 1.2, 0.3)),
        ("hybrid + word pairs in the lexical leg", lambda: bigrams(convs, dated)),
        ("hybrid + lexical feedback (m=3, 10 terms)", lambda: lexical_feedback(convs, dated)),
        ("hybrid + session prior (gamma=0.25)", lambda: session_prior(convs, dated)),
        ("MaxSim (token vectors) alone", lambda: maxsim_alone(tokens())),
        ("hybrid + MaxSim as a third leg", lambda: maxsim(False)),
        ("bm25 + MaxSim in place of dense", lambda: maxsim(True)),
    ]
    if unit == "facts":
        out += [
            ("facts in source-turn order", lambda: source_turn_order(convs)),
            *(
                (
                    f"facts + source message keys ({w})",
                    partial(provenance_keys, convs, dated, w, store, samples),
                )
                for w in ("lex", "dense", "both")
            ),
        ]
    return out


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, vectors="bundled")
    parser.add_argument("--unit", default="turns", choices=("turns", "facts"))
    args = parser.parse_args(argv)
    store = vector_store(args, embedder)
    samples = read_locomo(args.data)
    convs = load(args.unit, args.data, store)
    print(f"{args.unit}: R@5 / R@10 / R@25, MRR (hybrid mode unless named)")
    for name, make in rows(convs, args.unit, store, samples, args.cache, embedder):
        print(f"  {name:44s} {evaluate(convs, make()).row()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
