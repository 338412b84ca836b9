"""When does a recall at a threshold answer at all, in Chinese as in English, and how should
fusion read the dense leg? Measured on the bundled Chinese and mixed-language set
(``--dataset synthetic-zh``) for the configured embedder (``MEMORY_EMBEDDING__MODEL``).

Every memory's own questions, its off-topic probes (Chinese and English) and the previous
memory's questions are scored against its facts once (both legs, the service's tokenizer and
BM25, the embedder's query and passage sides; ``--cache`` keeps them). Then:

- the hybrid ranking per category (R@1/3/5, MRR) for fusion variants: plain, the dense leg
  centred per script (``EmbedderTuning.centre_scripts``), and the dense leg's weight for
  Chinese questions lowered (``dense_weight_by_script``);
- the distribution of the best cosine for real and off-topic questions per language;
- with ``--grid``, the threshold rule of ``longterm.evidence`` over its parameters: the share
  of real questions answered per language against the false injections per probe language.
  ``EmbedderTuning``'s values were chosen from it.

    python -m benchmarks.lab.zh_threshold [--users 18] [--grid] [--cache FILE]
"""

from __future__ import annotations

import argparse
import pickle
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexing.bm25 import BM25Index
from indexing.fusion import query_coverage
from indexing.scripts import script_of
from indexing.tokenize import query_terms
from memory_service.config.retrieval import HYBRID, RetrievalConfig
from memory_service.evaluation import metrics
from memory_service.evaluation.datasets import synthetic_zh
from memory_service.longterm.fusion import ByScript, LegHit, fact_terms, fuse_legs

TOP_K = 6


@dataclass
class Asked:
    """One question against one memory: both legs' scores per fact and each fact's coverage."""

    category: str
    gold: frozenset[int]
    cos: np.ndarray
    bm25: np.ndarray
    coverage: np.ndarray
    terms: list[str]
    script: str = "other"


@dataclass
class Memory:
    terms: list[frozenset[str]]
    scripts: list[str]
    asked: list[Asked] = field(default_factory=list)


def _embedder():
    from memory_service.config import load_settings
    from memory_service.services import build_embedder

    return build_embedder(load_settings())


class _Vectors:
    """Texts' vectors, once per text and side (passage or query)."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.memo: dict[tuple[str, str], np.ndarray] = {}

    def get(self, texts: Sequence[str], side: str) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (side, t) not in self.memo))
        if missing:
            fn = self.embedder.embed_query if side == "query" else self.embedder.embed
            for text, row in zip(missing, fn(missing), strict=True):
                self.memo[(side, text)] = np.asarray(row, dtype=np.float32)
        return np.stack([self.memo[(side, t)] for t in texts])


def cached_load(users: int, cache: Path | None) -> list[Memory]:
    """``load`` with the default preset, kept in ``cache`` (a pickle) when one is named: the
    labs that read the same scored questions embed them once."""
    if cache and cache.exists():
        return pickle.loads(cache.read_bytes())
    memories = load(users, HYBRID)
    if cache:
        cache.write_bytes(pickle.dumps(memories))
    return memories


def load(users: int, config: RetrievalConfig) -> list[Memory]:
    dataset = synthetic_zh.generate(users)
    vectors = _Vectors(_embedder())
    out = []
    convs = dataset.conversations
    for n, conv in enumerate(convs):
        facts = [item.to_fact() for item in conv.items]
        terms = [fact_terms(f, config) for f in facts]
        held = [frozenset(t) for t in terms]
        index = BM25Index(terms)
        docs = vectors.get([i.text for i in conv.items], "passage")
        ref_index = {r: i for i, item in enumerate(conv.items) for r in item.refs}
        memory = Memory(held, [script_of(i.text) for i in conv.items])
        foreign = [(q.text, "foreign " + q.category, frozenset()) for q in convs[n - 1].questions]
        asked = [
            (q.text, q.category, frozenset(ref_index[r] for r in q.gold)) for q in conv.questions
        ]
        asked += [(q.text, q.category, frozenset()) for q in conv.probes] + foreign
        queries = vectors.get([a[0] for a in asked], "query")
        for (text, category, gold), qv in zip(asked, queries, strict=True):
            qterms = query_terms(text)
            bm25 = np.zeros(len(facts))
            for hit in index.search(qterms, len(facts)):
                bm25[hit.index] = hit.score
            matched = {str(i): held[i] & set(qterms) for i in range(len(facts))}
            cover = query_coverage(qterms, matched, len(facts))
            coverage = np.array([cover[str(i)] for i in range(len(facts))])
            memory.asked.append(
                Asked(category, gold, docs @ qv, bm25, coverage, qterms, script_of(text))
            )
        out.append(memory)
    return out


def fused(
    memory: Memory,
    a: Asked,
    config: RetrievalConfig,
    threshold: float,
    k: int,
    mode: str = "hybrid",
    centre_scripts: bool = False,
    weights: dict[str, float] | None = None,
) -> list[int]:
    """The hybrid top ``k`` as the service fuses it (dense hits at least ``threshold``)."""
    depth = config.depth(k)
    order_d = [int(i) for i in np.argsort(-a.cos, kind="stable") if a.cos[i] >= threshold]
    order_b = [int(i) for i in np.argsort(-a.bm25, kind="stable") if a.bm25[i] > 0]
    legs = {
        "bm25": [
            LegHit(str(i), float(a.bm25[i]), matched=memory.terms[i] & set(a.terms))
            for i in order_b[:depth]
        ],
        "dense": [LegHit(str(i), float(a.cos[i])) for i in order_d[:depth]],
    }
    legs["dense"] = [
        LegHit(h.id, h.score, matched=memory.terms[int(h.id)] & set(a.terms)) for h in legs["dense"]
    ]
    if not legs["dense"]:
        return []
    weight = (weights or {}).get(a.script, 1.0)
    scripts = ByScript(lambda fid: memory.scripts[int(fid)], centre_scripts, weight)
    hits = fuse_legs(mode, legs, config, k, query_terms=a.terms, scripts=scripts)
    return [int(h.id) for h in hits]


def _group(a: Asked) -> str:
    """Real questions by the language asked in; probes by theirs; the rest foreign."""
    if a.gold:
        return "answered " + ("zh" if a.category in ("zh", "cross-zh-en") else "en")
    return a.category if a.category.startswith("off-topic") else "foreign"


def _best_cover(a: Asked) -> float:
    return float((a.coverage * (a.bm25 > 0)).max())


def answers(a: Asked, t: float, standout: float, weight: float, lexical: float | None) -> bool:
    """The service's rule at threshold ``t`` (``longterm.evidence``): with ``lexical`` set and
    a Chinese question, the lexical evidence alone (the model has no vote there); else a
    cosine reaching ``t`` and, with ``standout``, the best cosine's rise above the mean plus
    ``weight`` x the best lexical coverage reaching it."""
    if lexical is not None and a.script == "cjk":
        return _best_cover(a) >= lexical
    if not (a.cos >= t).any():
        return False
    if standout <= 0:
        return True
    rise = float(a.cos.max() - a.cos.mean())
    return rise + weight * _best_cover(a) >= standout


def rate(memories: list[Memory], *rule: float | None) -> dict[str, float]:
    got: dict[str, list[float]] = defaultdict(list)
    for m in memories:
        for a in m.asked:
            got[_group(a)].append(float(answers(a, *rule)))
    return {k: float(np.mean(v)) for k, v in sorted(got.items())}


def ranking(
    memories: list[Memory],
    config: RetrievalConfig,
    mode: str = "hybrid",
    centre: bool = False,
    weights: dict[str, float] | None = None,
) -> dict[str, list[float]]:
    """Per category: R@1, R@3, R@5, MRR of hybrid at threshold 0."""
    per: dict[str, list[list[float]]] = defaultdict(list)
    for m in memories:
        for a in m.asked:
            if not a.gold:
                continue
            ranked = [
                frozenset({str(i)}) for i in fused(m, a, config, 0.0, 25, mode, centre, weights)
            ]
            gold = frozenset(str(i) for i in a.gold)
            per[a.category].append(
                [metrics.recall_at_k(ranked, gold, k) for k in (1, 3, 5)]
                + [metrics.reciprocal_rank(ranked, gold)]
            )
    return {c: list(np.mean(v, axis=0)) for c, v in sorted(per.items())}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=synthetic_zh.DEFAULT_USERS)
    parser.add_argument("--grid", action="store_true", help="the threshold rule's grid")
    parser.add_argument("--cache", type=Path, help="keep the scored questions in this pickle")
    args = parser.parse_args(argv)
    memories = cached_load(args.users, args.cache)
    print("ranking per category (R@1/3/5, MRR), default preset:")
    variants = [("bm25", False, None), ("dense", False, None), ("hybrid", False, None)]
    variants += [("hybrid", True, None)]
    variants += [("hybrid", True, {"cjk": w}) for w in (0.5, 0.25, 0.0)]
    for mode, centre, weights in variants:
        label = (
            mode + (" centred" if centre else "") + (f" cjk {weights['cjk']}" if weights else "")
        )
        for cat, row in ranking(memories, HYBRID, mode, centre, weights).items():
            print(f"  {label:26} {cat:12} " + " ".join(f"{100 * x:5.1f}" for x in row))
    cos_own = [float(a.cos[list(a.gold)].max()) for m in memories for a in m.asked if a.gold]
    probe = defaultdict(list)
    for m in memories:
        for a in m.asked:
            if not a.gold:
                probe[a.category.split(" ")[0] + " " + a.category.split(" ")[-1]].append(
                    float(a.cos.max())
                )
    print("cosine of the gold fact: p10/p50/p90", np.percentile(cos_own, [10, 50, 90]).round(3))
    for k, v in sorted(probe.items()):
        print(f"best cosine, {k}: p50/p90/max", np.percentile(v, [50, 90, 100]).round(3))
    if args.grid:
        print("rule grid at threshold 0.45 (standout, weight, lexical): shares in %")
        for standout in np.arange(0.0, 0.2, 0.0025):
            for weight in (0.0, 0.1, 0.2, 0.3, 0.5):
                for lexical in (None, 0.1, 0.15, 0.2, 0.5):
                    row = rate(memories, 0.45, float(standout), weight, lexical)
                    shown = " ".join(f"{k}={100 * v:.1f}" for k, v in row.items())
                    print(f"  {standout:.4f} {weight:.1f} {lexical} {shown}")


if __name__ == "__main__":
    main()
