"""Does a second retrieval hop recall the evidence the first one misses?

LoCoMo's multi-hop and open-domain questions are where the default loses most: their answer is
spread over several memories, or reachable only through another one (the first hit names a
person, place or event; the evidence is a second memory about it). Each candidate here starts
from the default's first hop (``fuse_legs`` on the service's legs, as ``presets`` ranks: the
base row equals ``memory-service bench``) and adds one principled second step:

- ``rm3``: pseudo-relevance feedback on the lexical leg (RM3, as Anserini): the BM25 query
  becomes ``(1 - lambda)`` the question's terms plus ``lambda`` the terms of the first hop's
  top ``m`` (each memory's term distribution weighted by its fused score), then fused again.
- ``rocchio``: feedback on the dense leg: the query vector moved towards the mean of the top
  ``m`` hits' vectors, then fused again.
- ``term hop``: the salient terms the top ``m`` hits share with other memories (rarest first,
  df over the first hop's candidates, the only df a backend's candidates give, or over the
  whole memory; terms in more than ``max_share`` of the candidates are not salient), asked as a
  second BM25 query; its hits are fused with the first hop's list as one more leg of weight
  ``w`` (Graphiti's breadth-first search over entity edges, with a shared term as the edge).
  ``entities`` keeps only terms written capitalised mid-sentence (names of people, places,
  events).
- ``dense hop``: the centroid of the top ``m`` hits' vectors asked as a second dense query,
  fused the same way.
- ``mmr``: maximal marginal relevance over the final cut (cosine between memories, or the
  Jaccard of their lexical terms).
- ``adjacent hop``: the memories recorded next to the top ``m`` hits in their session, found
  by a leg or not, each scored ``w`` x its hit's fused score (session-neighbour smoothing
  extended from the candidates to the whole session).
- ``session spread``: a session's n-th hit counts ``decay ** (n - 1)`` of its score (field
  collapsing, softened).

What it found (``benchmarks/RESULTS.md``, "Second hop"): no hop is worth its cost. The best
rows move recall by less than a point, the held-out gains are smaller still, and RM3 loses;
the misses are aggregation questions ("What books has John read?") whose gold turns share
neither words nor a neighbourhood with the first hits. The adjacent hop, which reaches
memories no leg found, lifts turns a little and multi-hop not at all; session spread loses.

Each row: R@5 / R@10 / R@25 and MRR, then R@10 per LoCoMo category (1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop); the synthetic set also shows its legs, for the target "hybrid at
least each leg - 0.5".

    python -m benchmarks.lab.second_hop --data ../shared/data/locomo-dev.json \\
        --sets locomo-facts,locomo-turns,synthetic
    python -m benchmarks.lab.second_hop --data ... --sets locomo-facts,locomo-turns --held-out
    python -m benchmarks.lab.second_hop --data ... --sets locomo-facts,locomo-turns --misses
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.lab.common import (
    KS,
    TOP_K,
    Conv,
    Legs,
    Ranker,
    add_arguments,
    evaluate,
    leg_lists,
    service_legs,
    sets_of,
    top,
)
from indexing.bm25 import BM25Index
from indexing.fusion import zscore_fusion
from indexing.tokenize import tokenize
from memory_service.config.retrieval import PRESETS, RetrievalConfig
from memory_service.evaluation import metrics
from memory_service.longterm.fusion import FusedHit, fact_terms, fuse_legs
from memory_service.longterm.store_values import EPOCH

HYBRID = PRESETS["hybrid"]
# a capitalised word that does not start a sentence or a "Name:" speaker prefix
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")


@dataclass
class Memory:
    """One conversation as the second hop sees it: the service's legs, its lexical documents,
    their BM25 index (one score row per term, cached) and the capitalised words of each text."""

    conv: Conv
    legs: Legs
    docs: list[list[str]]
    index: BM25Index
    names: list[frozenset[str]]
    df: Counter[str]
    _rows: dict[str, np.ndarray] = field(default_factory=dict)

    def term_row(self, term: str) -> np.ndarray:
        if term not in self._rows:
            self._rows[term] = self.index.scores([term])
        return self._rows[term]

    def bm25(self, weights: Mapping[str, float]) -> np.ndarray:
        """BM25 of a weighted query over every memory; -inf where no term is shared."""
        out = np.zeros(len(self.docs))
        for term, weight in weights.items():
            out += weight * self.term_row(term)
        return np.where(out > 0, out, -np.inf)


def memories(convs: Sequence[Conv], config: RetrievalConfig = HYBRID) -> dict[str, Memory]:
    legs = service_legs(convs, config)
    out = {}
    for c in convs:
        docs = [fact_terms(item.to_fact(), config) for item in c.items]
        names = [
            frozenset(t for m in _NAME.findall(item.text) for t in tokenize(m)) for item in c.items
        ]
        df = Counter(t for d in docs for t in set(d))
        out[c.id] = Memory(c, legs[c.id], docs, BM25Index(docs), names, df)
    return out


def first_hop(
    mem: Memory,
    row: int,
    legs: Legs | None = None,
    extra: Sequence[str] = (),
    *,
    top_k: int = TOP_K,
):
    """The default's fused top ``top_k`` for question ``row`` (``legs`` in place of the
    memory's own when given; ``extra`` terms join the query terms coverage reads)."""
    conv = mem.conv
    depth = HYBRID.depth(TOP_K)
    hits = leg_lists(conv, legs or mem.legs, row, depth)
    terms = [*tokenize(conv.questions[row]), *extra]
    return fuse_legs("hybrid", hits, HYBRID, top_k, query_terms=terms), hits


def baseline(mems: Mapping[str, Memory]) -> Ranker:
    return lambda conv, row: [int(h.id) for h in first_hop(mems[conv.id], row)[0]]


def _weights(fused: Sequence[FusedHit], m: int) -> np.ndarray:
    """The top ``m`` hits' fused scores as feedback weights (softmax: z-scores can be < 0)."""
    s = np.array([h.score for h in fused[:m]])
    e = np.exp(s - s.max())
    return e / e.sum()


def rm3(mems: Mapping[str, Memory], m: int = 5, terms: int = 10, lam: float = 0.3) -> Ranker:
    """RM3 on the lexical leg, then the same fusion."""

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row)
        if not fused:
            return []
        asked = Counter(tokenize(conv.questions[row]))
        feedback: Counter[str] = Counter()
        for h, w in zip(fused[:m], _weights(fused, m), strict=False):
            doc = Counter(mem.docs[int(h.id)])
            length = sum(doc.values())
            for term, n in doc.items():
                feedback[term] += w * n / length
        # RM3 keeps the model's best terms; terms nearly every memory holds carry no evidence
        n_docs = len(mem.docs)
        chosen = [t for t, _ in feedback.most_common() if mem.df[t] < n_docs / 2][:terms]
        total = sum(feedback[t] for t in chosen) or 1.0
        q_total = sum(asked.values())
        weights: Counter[str] = Counter()
        for t, n in asked.items():
            weights[t] += (1 - lam) * n / q_total
        for t in chosen:
            weights[t] += lam * feedback[t] / total
        # scaled back to the question's own units (one unit per query term)
        weights = Counter({t: w * q_total for t, w in weights.items()})
        bm25 = mem.legs.bm25.copy()
        bm25[row] = mem.bm25(weights)
        legs = Legs(bm25, mem.legs.dense, mem.legs.terms)
        return [int(h.id) for h in first_hop(mem, row, legs, chosen)[0]]

    return rank


def rocchio(mems: Mapping[str, Memory], m: int = 3, beta: float = 0.5) -> Ranker:
    """Rocchio on the dense leg, then the same fusion."""

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row)
        if not fused:
            return []
        ids = [int(h.id) for h in fused[:m]]
        query = conv.query_vectors[row] + beta * (_weights(fused, m) @ conv.doc_vectors[ids])
        query /= np.linalg.norm(query)
        dense = mem.legs.dense.copy()
        dense[row] = conv.doc_vectors @ query
        legs = Legs(mem.legs.bm25, dense, mem.legs.terms)
        return [int(h.id) for h in first_hop(mem, row, legs)[0]]

    return rank


def hop_terms(
    mem: Memory,
    fused: Sequence[FusedHit],
    asked: set[str],
    *,
    m: int,
    terms: int,
    df_over: str,
    max_share: float,
    entities: bool,
) -> list[str]:
    """The salient terms of the top ``m`` hits that other memories also hold, rarest first."""
    pool = {h.id for h in fused}
    if df_over == "candidates":
        df = Counter(t for i in pool for t in set(mem.docs[int(i)]))
        size = len(pool)
    else:
        df, size = mem.df, len(mem.docs)
    seen: Counter[str] = Counter()
    for h in fused[:m]:
        held = set(mem.docs[int(h.id)])
        if entities:
            held &= mem.names[int(h.id)]
        seen.update(held - asked)
    shared = [t for t in seen if mem.df[t] > seen[t] and df[t] <= max_share * size and t.isalpha()]
    # rarest first (IDF over the df chosen), then the more top hits hold it
    shared.sort(key=lambda t: (df[t], -seen[t], t))
    return shared[:terms]


def _refuse(
    fused: Sequence[FusedHit], hop: Sequence[tuple[str, float]], w: float, floor: float | None
) -> list[int]:
    """The first hop's list and a second-hop leg as one z-score fusion (the first hop's floor:
    its lowest fused score; the hop's: BM25's no-match 0, or its lowest score)."""
    first = [(h.id, h.score) for h in fused]
    floors = {"first": min(s for _, s in first)}
    if floor is not None:
        floors["hop"] = floor
    out = zscore_fusion(
        {"first": first, "hop": list(hop)}, weights={"first": 1.0, "hop": w}, floors=floors
    )
    return [int(c.id) for c in out]


def term_hop(
    mems: Mapping[str, Memory],
    *,
    m: int = 3,
    terms: int = 5,
    w: float = 0.3,
    df_over: str = "candidates",
    max_share: float = 0.2,
    entities: bool = False,
) -> Ranker:
    """A second BM25 query over the top hits' salient shared terms, fused as one more leg."""

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row)
        if not fused:
            return []
        asked = set(tokenize(conv.questions[row]))
        chosen = hop_terms(
            mem,
            fused,
            asked,
            m=m,
            terms=terms,
            df_over=df_over,
            max_share=max_share,
            entities=entities,
        )
        if not chosen:
            return [int(h.id) for h in fused]
        scores = mem.bm25(dict.fromkeys(chosen, 1.0))
        depth = HYBRID.depth(TOP_K)
        hop = [(str(i), float(scores[i])) for i in top(scores, depth)]
        return _refuse(fused, hop, w, 0.0 if len(hop) < depth else None)

    return rank


def dense_hop(
    mems: Mapping[str, Memory], *, m: int = 3, w: float = 0.3, each: bool = False
) -> Ranker:
    """The centroid of the top hits' vectors as a second dense query, fused as one more leg;
    ``each``: every top hit's vector a query of its own, a memory's score its best one (a
    neighbour of any first hit, not of their mean)."""

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row)
        if not fused:
            return []
        ids = [int(h.id) for h in fused[:m]]
        if each:
            scores = (conv.doc_vectors @ conv.doc_vectors[ids].T).max(axis=1)
        else:
            centroid = _weights(fused, m) @ conv.doc_vectors[ids]
            scores = conv.doc_vectors @ (centroid / np.linalg.norm(centroid))
        hop = [(str(i), float(scores[i])) for i in top(scores, HYBRID.depth(TOP_K))]
        return _refuse(fused, hop, w, None)

    return rank


def timeline(conv: Conv) -> list[list[int]]:
    """Each memory's session mates in time order (its session's list; none for no session)."""
    sessions: dict[str, list[int]] = {}
    for i, item in enumerate(conv.items):
        if item.session_id is not None:
            sessions.setdefault(item.session_id, []).append(i)
    out: list[list[int]] = [[] for _ in conv.items]
    for members in sessions.values():
        members.sort(key=lambda i: (conv.items[i].created_at or EPOCH, i))
        for i in members:
            out[i] = members
    return out


def adjacent_hop(
    mems: Mapping[str, Memory], *, m: int = 3, span: int = 1, w: float = 0.5
) -> Ranker:
    """The memories recorded next to the top ``m`` hits in their session (``span`` on either
    side), whether or not a leg found them, each scored ``w`` x its hit's fused score: the
    session-neighbour smoothing of the default, extended from the candidates to the whole
    session (a memory no leg found has the lowest score, 0, before its lift)."""
    order = {cid: timeline(mem.conv) for cid, mem in mems.items()}

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row, top_k=HYBRID.depth(TOP_K))
        score = {int(h.id): h.score for h in fused}
        lifted: dict[int, float] = {}
        for h in fused[:m]:
            seed = int(h.id)
            mates = order[conv.id][seed]
            if not mates:
                continue
            at = mates.index(seed)
            for j in mates[max(0, at - span) : at + span + 1]:
                if j not in score:
                    lifted[j] = max(lifted.get(j, -np.inf), w * h.score)
        merged = sorted([*score.items(), *lifted.items()], key=lambda p: -p[1])
        return [i for i, _ in merged]

    return rank


def session_spread(mems: Mapping[str, Memory], *, decay: float = 0.8) -> Ranker:
    """Diversity by session (search engines' field collapsing, softened): over the fused top
    ``depth``, a session's n-th hit counts ``decay ** (n - 1)`` of its score, so an answer
    spread over several sessions reaches the cut before a session's fourth look-alike."""

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row, top_k=HYBRID.depth(TOP_K))
        seen: Counter[str] = Counter()
        scored = []
        for h in fused:  # best first: a session's n-th hit is its n-th best
            session = conv.items[int(h.id)].session_id
            scored.append((h.score * decay ** seen[session], int(h.id)))
            seen[session] += 1
        return [i for _, i in sorted(scored, key=lambda p: -p[0])]

    return rank


def mmr(
    mems: Mapping[str, Memory], lam: float = 0.8, *, similarity: str = "dense", pool: int = TOP_K
) -> Ranker:
    """Maximal marginal relevance over the fused top ``pool``: similarity between memories
    as the cosine of their vectors (``dense``) or the Jaccard of their lexical terms
    (``terms``, which a backend's candidates give without their vectors)."""

    def rank(conv: Conv, row: int) -> list[int]:
        mem = mems[conv.id]
        fused, _ = first_hop(mem, row, top_k=pool)
        ids = [int(h.id) for h in fused]
        if not ids:
            return []
        s = np.array([h.score for h in fused])
        s = (s - s.min()) / ((s.max() - s.min()) or 1.0)
        if similarity == "dense":
            sim = conv.doc_vectors[ids] @ conv.doc_vectors[ids].T
        else:
            held = [set(mem.docs[i]) for i in ids]
            sim = np.array([[len(a & b) / (len(a | b) or 1) for b in held] for a in held])
        chosen, rest = [0], list(range(1, len(ids)))
        while rest:
            best = max(rest, key=lambda j: lam * s[j] - (1 - lam) * sim[j, chosen].max())
            chosen.append(best)
            rest.remove(best)
        return [ids[j] for j in chosen]

    return rank


def single_leg(mems: Mapping[str, Memory], leg: str) -> Ranker:
    """One leg's own ranking, as ``retrieve(mode=leg)`` answers."""

    def rank(conv: Conv, row: int) -> list[int]:
        hits = leg_lists(conv, mems[conv.id].legs, row, HYBRID.depth(TOP_K))
        return [int(h.id) for h in fuse_legs(leg, hits, HYBRID, TOP_K)]

    return rank


def candidates(mems: Mapping[str, Memory]) -> list[tuple[str, Callable[[], Ranker]]]:
    """Every row of the table, in print order: (name, a function making its ranker)."""
    rows: list[tuple[str, Callable[[], Ranker]]] = [
        ("bm25 leg", lambda: single_leg(mems, "bm25")),
        ("dense leg", lambda: single_leg(mems, "dense")),
        ("hybrid (today's default)", lambda: baseline(mems)),
        ("rm3 m=5 10 terms lambda=0.3", lambda: rm3(mems)),
        ("rm3 m=3 10 terms lambda=0.5", lambda: rm3(mems, m=3, lam=0.5)),
        ("rocchio m=3 beta=0.5", lambda: rocchio(mems)),
        ("rocchio m=5 beta=0.25", lambda: rocchio(mems, m=5, beta=0.25)),
        ("mmr lambda=0.8", lambda: mmr(mems)),
        ("mmr lambda=0.9", lambda: mmr(mems, 0.9)),
        ("mmr lambda=0.8, pool 50", lambda: mmr(mems, pool=50)),
        ("mmr lambda=0.8, term similarity", lambda: mmr(mems, similarity="terms")),
        ("mmr lambda=0.9, term similarity", lambda: mmr(mems, 0.9, similarity="terms")),
        ("mmr lambda=0.7, term similarity", lambda: mmr(mems, 0.7, similarity="terms")),
        ("dense hop m=3 w=0.3", lambda: dense_hop(mems)),
        ("dense hop m=5 w=0.2", lambda: dense_hop(mems, m=5, w=0.2)),
        ("dense hop m=3 w=0.5", lambda: dense_hop(mems, w=0.5)),
        ("dense hop m=2 w=0.3", lambda: dense_hop(mems, m=2)),
        ("dense hop m=3 w=0.3, each hit", lambda: dense_hop(mems, each=True)),
    ]
    for m, n, w in ((3, 5, 0.3), (3, 5, 0.15), (5, 8, 0.3), (3, 3, 0.3), (1, 5, 0.3)):
        rows.append(
            (
                f"term hop m={m} {n} terms w={w}",
                lambda m=m, n=n, w=w: term_hop(mems, m=m, terms=n, w=w),
            )
        )
    rows += [
        (
            "term hop m=3 5 terms w=0.3, df: memory",
            lambda: term_hop(mems, df_over="memory", max_share=0.05),
        ),
        ("entity hop m=3 5 terms w=0.3", lambda: term_hop(mems, entities=True)),
        ("entity hop m=5 5 terms w=0.3", lambda: term_hop(mems, m=5, entities=True)),
    ]
    for decay in (0.9, 0.8, 0.6):
        rows.append(
            (f"session spread decay={decay}", lambda d=decay: session_spread(mems, decay=d))
        )
    for m, span, w in (
        (3, 1, 0.5),
        (5, 1, 0.5),
        (3, 2, 0.5),
        (3, 1, 0.3),
        (10, 1, 0.5),
        (1, 1, 0.5),
    ):
        rows.append(
            (
                f"adjacent hop m={m} span={span} w={w}",
                lambda m=m, span=span, w=w: adjacent_hop(mems, m=m, span=span, w=w),
            )
        )
    return rows


def families(mems: Mapping[str, Memory]) -> dict[str, list[tuple[str, Callable[[], Ranker]]]]:
    """Each candidate's small grid, for ``--held-out``: a setting chosen on four
    conversations is tested on the fifth."""
    return {
        "rm3": [
            (f"m={m} lambda={lam}", lambda m=m, lam=lam: rm3(mems, m=m, lam=lam))
            for m in (3, 5)
            for lam in (0.1, 0.3)
        ],
        "rocchio": [
            (f"m={m} beta={b}", lambda m=m, b=b: rocchio(mems, m=m, beta=b))
            for m in (3, 5)
            for b in (0.25, 0.5)
        ],
        "dense hop": [
            (f"m={m} w={w}", lambda m=m, w=w: dense_hop(mems, m=m, w=w))
            for m in (2, 3, 5)
            for w in (0.1, 0.2, 0.3, 0.5)
        ],
        "entity hop": [
            (f"m={m} w={w}", lambda m=m, w=w: term_hop(mems, m=m, w=w, entities=True))
            for m in (3, 5)
            for w in (0.15, 0.3)
        ],
        "mmr": [(f"lambda={lam}", lambda lam=lam: mmr(mems, lam)) for lam in (0.7, 0.8, 0.9)],
        "adjacent hop": [
            (f"m={m} span={s} w={w}", lambda m=m, s=s, w=w: adjacent_hop(mems, m=m, span=s, w=w))
            for m in (3, 5)
            for s in (1, 2)
            for w in (0.3, 0.5)
        ],
    }


def held_out(convs: Sequence[Conv], mems: Mapping[str, Memory]) -> dict[str, dict]:
    """Per family, leave one conversation out: the setting with the best R@10 on the other
    conversations (pooled by question) is scored on the one left out; printed and returned
    as the pooled held-out R@10 beside the default's and the settings each fold chose."""
    n = {c.id: len(c.questions) for c in convs}
    base = evaluate(convs, baseline(mems)).per_conv
    base_r10 = sum(base[c][10] * n[c] for c in n) / sum(n.values())
    out = {}
    for family, grid in families(mems).items():
        per = {label: evaluate(convs, make()).per_conv for label, make in grid}
        chosen, total = [], 0.0
        for left in n:
            rest = [c for c in n if c != left]

            def pooled(label: str, rest: list[str] = rest, per: dict = per) -> float:
                return sum(per[label][c][10] * n[c] for c in rest)

            best = max(per, key=pooled)
            chosen.append(best)
            total += per[best][left][10] * n[left]
        r10 = total / sum(n.values())
        out[family] = {"held_out_r10": r10, "default_r10": base_r10, "chosen": chosen}
        print(
            f"  {family:12s} held-out R@10 {100 * r10:.1f} (default {100 * base_r10:.1f}, "
            f"{100 * (r10 - base_r10):+.1f}); chosen: {', '.join(chosen)}",
            flush=True,
        )
    return out


def misses(convs: Sequence[Conv], mems: Mapping[str, Memory]) -> dict[str, dict[str, float]]:
    """Per category, where the default's fused list (to the legs' depth) places each gold id:
    in the top 10, at 11-25, at 26 or deeper, or nowhere (no leg's candidate carries it, or no
    memory does). Printed and returned as shares."""
    depth = HYBRID.depth(TOP_K)
    counts: dict[str, Counter[str]] = {}
    for conv in convs:
        mem = mems[conv.id]
        for row, gold in enumerate(conv.gold):
            fused, _ = first_hop(mem, row, top_k=depth)
            place: dict[str, int] = {}
            for rank, h in enumerate(fused, start=1):
                for g in conv.refs[int(h.id)] & gold:
                    place.setdefault(g, rank)
            bucket = counts.setdefault(conv.categories[row], Counter())
            for g in gold:
                r = place.get(g)
                bucket[
                    "nowhere" if r is None else "1-10" if r <= 10 else "11-25" if r <= 25 else "26+"
                ] += 1
    out = {}
    for category in sorted(counts):
        c = counts[category]
        total = sum(c.values())
        out[category] = {b: c[b] / total for b in ("1-10", "11-25", "26+", "nowhere")}
        cells = "  ".join(f"{b} {100 * v:4.1f} %" for b, v in out[category].items())
        print(f"  {category:14s} {total:4d} gold ids  {cells}", flush=True)
    return out


@dataclass
class Row:
    recall: dict[int, float]
    mrr: float
    by_category: dict[str, float]

    def cells(self) -> str:
        r = " / ".join(f"{100 * self.recall[k]:.1f}" for k in KS)
        cats = "  ".join(f"{100 * v:5.1f}" for v in self.by_category.values())
        return f"{r}  MRR {100 * self.mrr:.1f}  | {cats}"


def score(convs: Sequence[Conv], rank: Ranker) -> Row:
    """Mean evidence recall@k, MRR and R@10 per category, as ``memory-service bench``."""
    recall: dict[int, list[float]] = {k: [] for k in KS}
    rr: list[float] = []
    per: dict[str, list[float]] = {}
    for conv in convs:
        for row, gold in enumerate(conv.gold):
            ranked = [conv.refs[i] for i in rank(conv, row)[: max(*KS, 10)]]
            for k in KS:
                recall[k].append(metrics.recall_at_k(ranked, gold, k))
            rr.append(metrics.reciprocal_rank(ranked, gold))
            per.setdefault(conv.categories[row], []).append(metrics.recall_at_k(ranked, gold, 10))
    cats = {c: float(np.mean(per[c])) for c in sorted(per)}
    return Row({k: float(np.mean(v)) for k, v in recall.items()}, float(np.mean(rr)), cats)


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, sets="locomo-facts,locomo-turns")
    parser.add_argument("--only", default="", help="comma-separated substrings of row names")
    parser.add_argument("--json", type=Path, help="write every row's figures here")
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="per candidate, a setting chosen on all conversations but one, scored on that one",
    )
    parser.add_argument(
        "--misses", action="store_true", help="where the default ranks each gold id, by category"
    )
    args = parser.parse_args(argv)
    sets = sets_of(args, embedder)
    wanted = [w for w in args.only.split(",") if w]
    out: dict[str, dict[str, dict]] = {}
    for name, convs in sets.items():
        mems = memories(convs)
        if args.misses:
            print(f"\n{name}: where the default places each gold id", flush=True)
            out[name] = misses(convs, mems)
            continue
        if args.held_out:
            print(f"\n{name}: leave one conversation out, R@10", flush=True)
            out[name] = held_out(convs, mems)
            continue
        cats = sorted({c for conv in convs for c in conv.categories})
        labels = "  ".join(f"{c.split()[-1][:5]:>5s}" for c in cats)
        print(f"\n{name}: R@5 / R@10 / R@25  MRR  | R@10 by category: {labels}", flush=True)
        out[name] = {}
        for label, make in candidates(mems):
            kept = "leg" in label or label.startswith("hybrid")
            if wanted and not kept and not any(w in label for w in wanted):
                continue
            row = score(convs, make())
            out[name][label] = {
                "recall": {str(k): v for k, v in row.recall.items()},
                "mrr": row.mrr,
                "r10_by_category": row.by_category,
            }
            print(f"  {label:40s} {row.cells()}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
