"""Offline recall lab: many retrieval variants on LoCoMo in seconds, with the service's own parts.

``memory-service bench`` records every memory into a fresh backend and asks every question
through ``retrieve``: faithful, but minutes per run. This lab loads the dataset with the bench's
own loader (same items, same metadata, same gold), embeds every memory and question once with the
bundled model (vectors cached under ``benchmarks/results/lab/``, git-ignored), and scores the
legs with the service's tokenizer and BM25 (``indexing``). A variant is a function from the two
legs' candidate lists to a ranking, so fusion code from ``memory_service.longterm.fusion``
runs here unchanged; winners are then confirmed end to end with ``memory-service bench``.

    .venv/bin/python benchmarks/recall_lab.py --unit turns            # the default preset's table
    .venv/bin/python benchmarks/recall_lab.py --unit facts --presets  # every preset, every mode
    .venv/bin/python benchmarks/recall_lab.py --loco                  # grid + leave-one-out
    .venv/bin/python benchmarks/recall_lab.py --latency files         # rrf-plain vs hybrid A/B
    .venv/bin/python benchmarks/recall_lab.py --unit facts --ceiling  # a perfect ranking's recall

The data file is ``../shared/data/locomo-dev.json`` (CC BY-NC: read, never copied here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from indexing.bm25 import BM25Index  # noqa: E402
from indexing.lexical import lexical_terms  # noqa: E402
from indexing.tokenize import tokenize  # noqa: E402
from memory_service.bench import metrics  # noqa: E402
from memory_service.bench.dataset import Dataset, MemoryItem  # noqa: E402
from memory_service.bench.datasets.locomo import load_locomo  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"
CACHE = ROOT / "benchmarks" / "results" / "lab"
KS = (5, 10, 25)


# -- embeddings, cached on disk ---------------------------------------------------------------


class VectorStore:
    """Text -> normalised vector of the bundled model, computed once and kept in an .npz."""

    def __init__(self, path: Path = CACHE / "vectors.npz") -> None:
        self.path = path
        self._vectors: dict[str, np.ndarray] = {}
        self._embedder = None
        if path.exists():
            with np.load(path) as data:
                keys = [str(k) for k in data["keys"]]
                self._vectors = dict(zip(keys, data["vectors"], strict=True))

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self._key(t) not in self._vectors))
        if missing:
            if self._embedder is None:
                from indexing.embeddings import SentenceTransformerEmbedder

                self._embedder = SentenceTransformerEmbedder(num_threads=2)
            vectors = self._embedder.embed(missing)
            for text, vector in zip(missing, vectors, strict=True):
                self._vectors[self._key(text)] = vector
            self._save()
        return np.stack([self._vectors[self._key(t)] for t in texts]).astype(np.float32)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._vectors))
        np.savez(self.path, keys=keys, vectors=np.stack(list(self._vectors.values())))


# -- one conversation, scored by both legs ----------------------------------------------------


@dataclass
class Conv:
    """One memory of the benchmark: its items, its questions and both legs' full score rows."""

    id: str
    items: list[MemoryItem]
    refs: list[frozenset[str]]
    questions: list[str]
    gold: list[frozenset[str]]
    categories: list[str]
    doc_vectors: np.ndarray
    query_vectors: np.ndarray
    extra: dict[str, object] = field(default_factory=dict)

    def dense(self) -> np.ndarray:
        """Cosine of every question (rows) with every memory (columns)."""
        return self.query_vectors @ self.doc_vectors.T

    def bm25(
        self,
        doc_tokens: Callable[[int], list[str]] | None = None,
        query_tokens: Callable[[str], list[str]] = tokenize,
        k1: float = 1.2,
        b: float = 0.75,
        *,
        date_terms: bool = False,
    ) -> np.ndarray:
        """BM25 of every question with every memory; -inf where no term is shared (no hit).

        Documents are what the service indexes (``lexical_terms``) unless ``doc_tokens`` says
        otherwise."""
        docs = [
            doc_tokens(i)
            if doc_tokens
            else lexical_terms(item.text, item.created_at, with_date=date_terms)
            for i, item in enumerate(self.items)
        ]
        index = BM25Index(docs, k1=k1, b=b)
        out = np.full((len(self.questions), len(docs)), -np.inf, dtype=np.float64)
        for row, question in enumerate(self.questions):
            for hit in index.search(query_tokens(question), len(docs)):
                out[row, hit.index] = hit.score
        return out


def load(unit: str, *, turn_text: str = "speaker", store: VectorStore | None = None) -> list[Conv]:
    dataset: Dataset = load_locomo(json.loads(DATA.read_text()), unit=unit, turn_text=turn_text)
    store = store or VectorStore()
    convs = []
    for c in dataset.conversations:
        if not c.questions:
            continue
        # Two items with one text become one fact carrying both refs, as recording does.
        merged: dict[str, MemoryItem] = {}
        refs: dict[str, set[str]] = {}
        for item in c.items:
            key = " ".join(item.text.split()).casefold()
            merged.setdefault(key, item)
            refs.setdefault(key, set()).update(item.refs)
        items = list(merged.values())
        convs.append(
            Conv(
                c.id,
                items,
                [frozenset(refs[k]) for k in merged],
                [q.text for q in c.questions],
                [q.gold for q in c.questions],
                [q.category for q in c.questions],
                store.embed([i.text for i in items]),
                store.embed([q.text for q in c.questions]),
            )
        )
    return convs


# -- rankings and metrics ---------------------------------------------------------------------


def top(scores: np.ndarray, depth: int) -> list[int]:
    """Indices of the best ``depth`` finite scores, best first (ties: lower index first)."""
    finite = np.flatnonzero(np.isfinite(scores))
    order = finite[np.lexsort((finite, -scores[finite]))]
    return [int(i) for i in order[:depth]]


Ranker = Callable[[Conv, int], list[int]]  # (conversation, question row) -> ranked item indices


@dataclass
class Scores:
    recall: dict[int, float]
    mrr: float
    per_conv: dict[str, dict[int, float]]

    def row(self) -> str:
        r = " / ".join(f"{self.recall[k]:.3f}" for k in KS)
        return f"{r}  MRR {self.mrr:.3f}"


def evaluate(convs: Sequence[Conv], ranker: Ranker, ks: Sequence[int] = KS) -> Scores:
    """Mean evidence recall@k and MRR over all questions, as ``memory-service bench`` computes
    them (each ranked memory carries its refs), plus recall per conversation."""
    total = {k: [] for k in ks}
    rr = []
    per_conv = {}
    for conv in convs:
        mine = {k: [] for k in ks}
        for row, gold in enumerate(conv.gold):
            ranked = [conv.refs[i] for i in ranker(conv, row)[: max(*ks, 10)]]
            for k in ks:
                value = metrics.recall_at_k(ranked, gold, k)
                total[k].append(value)
                mine[k].append(value)
            rr.append(metrics.reciprocal_rank(ranked, gold))
        per_conv[conv.id] = {k: float(np.mean(v)) for k, v in mine.items()}
    return Scores({k: float(np.mean(v)) for k, v in total.items()}, float(np.mean(rr)), per_conv)


def ceiling(convs: Sequence[Conv], ks: Sequence[int] = KS) -> dict[int, float]:
    """Recall@k of the best possible ranking: per question, ``k`` memories chosen greedily to
    cover the most gold ids. Greedy adds a new gold id each step while one is reachable, so for
    k at least the gold count (LoCoMo: at most 9) it is exact; below that, a lower bound. Under
    1 when some gold id is carried by no memory."""
    total = {k: [] for k in ks}
    for conv in convs:
        for gold in conv.gold:
            covered: set[str] = set()
            for k in range(1, max(ks) + 1):
                covered |= max(conv.refs, key=lambda refs: len((refs & gold) - covered)) & gold
                if k in total:
                    total[k].append(len(covered) / len(gold))
    return {k: float(np.mean(v)) for k, v in total.items()}


# -- the service's fusion, on the lab's legs ----------------------------------------------------


@dataclass
class Legs:
    """Both legs' full score matrices for one conversation (rows: questions)."""

    bm25: np.ndarray
    dense: np.ndarray


def leg_lists(conv: Conv, legs: Legs, row: int, depth: int, threshold: float = 0.0):
    """What a backend hands ``fuse_legs``: each leg's top ``depth`` as ``LegHit`` lists, with
    the memory's session and time (a lexical hit needs a shared term, a dense one the
    threshold)."""
    from memory_service.longterm.fusion import LegHit

    dense = np.where(legs.dense[row] >= threshold, legs.dense[row], -np.inf)
    out = {}
    for leg, scores in (("bm25", legs.bm25[row]), ("dense", dense)):
        out[leg] = [
            LegHit(str(i), float(scores[i]), conv.items[i].session_id, conv.items[i].created_at)
            for i in top(scores, depth)
        ]
    return out


def service_ranker(config, legs: dict[str, Legs], top_k: int = 25, mode: str = "hybrid") -> Ranker:
    """Rank with ``fuse_legs`` exactly as a backend does for ``retrieve(top_k)``."""
    from memory_service.longterm.fusion import fuse_legs

    def rank(conv: Conv, row: int) -> list[int]:
        hits = leg_lists(conv, legs[conv.id], row, config.depth(top_k))
        return [int(h.id) for h in fuse_legs(mode, hits, config, top_k)]

    return rank


def all_legs(convs: Sequence[Conv], *, date_terms: bool) -> dict[str, Legs]:
    return {c.id: Legs(c.bm25(date_terms=date_terms), c.dense()) for c in convs}


# -- parameter grid and leave-one-conversation-out --------------------------------------------


def grid_configs():
    """The configurations the grid searches: dense weight, neighbour weight and window, dates."""
    from itertools import product
    from types import MappingProxyType

    from memory_service.config.retrieval import RetrievalConfig

    for dense_w, alpha, window, dates in product(
        (0.7, 0.85, 1.0, 1.2), (0.0, 0.25, 0.5, 0.75), (1, 2, 3), (False, True)
    ):
        if alpha == 0.0 and window != 1:
            continue  # the window means nothing without smoothing
        yield RetrievalConfig(
            name=f"z wd={dense_w} a={alpha} w={window} dates={int(dates)}",
            fusion="zscore",
            weights=MappingProxyType({"bm25": 1.0, "dense": dense_w}),
            neighbour_weight=alpha,
            neighbour_window=window,
            date_terms=dates,
        )


def objective(recall: dict[int, float]) -> float:
    """What the grid maximises: mean recall over k = 5, 10, 25."""
    return float(np.mean([recall[k] for k in KS]))


def per_conv_table(units: dict[str, list[Conv]], configs) -> dict[str, dict[str, dict]]:
    """recall@k per conversation, per unit, per configuration (name)."""
    legs = {
        (unit, dates): all_legs(convs, date_terms=dates)
        for unit, convs in units.items()
        for dates in (False, True)
    }
    table: dict[str, dict[str, dict]] = {}
    for config in configs:
        table[config.name] = {}
        for unit, convs in units.items():
            ranker = service_ranker(config, legs[(unit, config.date_terms)])
            table[config.name][unit] = evaluate(convs, ranker).per_conv
    return table


def pooled(per_conv: dict[str, dict[int, float]], weights: dict[str, int], ids) -> dict[int, float]:
    """Question-weighted mean recall over the conversations ``ids``."""
    total = sum(weights[i] for i in ids)
    return {k: sum(per_conv[i][k] * weights[i] for i in ids) / total for k in KS}


def loco(units: dict[str, list[Conv]], table) -> list[tuple[str, str, dict[str, dict]]]:
    """For each conversation: the configuration best on the other four (both units together),
    and its recall on the held-out one."""
    sizes = {unit: {c.id: len(c.gold) for c in convs} for unit, convs in units.items()}
    ids = [c.id for c in next(iter(units.values()))]
    out = []
    for held in ids:
        train = [i for i in ids if i != held]

        def score(name: str, train=train) -> float:
            return float(
                np.mean([objective(pooled(table[name][u], sizes[u], train)) for u in units])
            )

        best = max(table, key=score)
        tested = {u: pooled(table[best][u], sizes[u], [held]) for u in units}
        out.append((held, best, tested))
    return out


def latency(backend: str = "files", conversation: int = 0, rounds: int = 1) -> dict[str, dict]:
    """``retrieve`` latency of ``rrf-plain`` against ``hybrid`` on one LoCoMo conversation, both
    presets over the same facts and the same query embedder, asked alternately question by
    question (first one, then the other, order swapped every question) so machine noise hits
    both alike. Milliseconds, query embedding included, as ``memory-service bench`` reports."""
    import tempfile
    import time

    from indexing.embeddings import CachedEmbedder, SentenceTransformerEmbedder
    from memory_service.bench.dataset import safe_user_id
    from memory_service.config import QdrantSettings
    from memory_service.config.retrieval import PRESETS
    from memory_service.context import RuntimeContext
    from memory_service.longterm.files.backend import FileSystemLongTermMemory
    from memory_service.longterm.qdrant.backend import open_qdrant

    dataset = load_locomo(json.loads(DATA.read_text()), unit="turns")
    conv = dataset.conversations[conversation]
    ctx = RuntimeContext("lab", safe_user_id(conv.id))
    model = SentenceTransformerEmbedder(num_threads=2)
    documents = CachedEmbedder(model)
    names = ("rrf-plain", "hybrid")
    times: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        memories = {}
        for name in names:
            root = Path(tmp) / name
            if backend == "files":
                memory = FileSystemLongTermMemory(root, documents, retrieval=PRESETS[name])
            else:
                settings = QdrantSettings(path=root / "qdrant")
                memory = open_qdrant(settings, root, documents, retrieval=PRESETS[name])
            memory.record(ctx, [item.to_fact() for item in conv.items])
            memory.retrieve(ctx, "warm up", 1)  # builds the index
            memories[name] = memory
        queries = [q.text for q in conv.questions]
        for _ in range(rounds):
            for i, query in enumerate(queries):
                for name in names if i % 2 == 0 else names[::-1]:
                    memory = memories[name]
                    memory._embedder = model  # queries never come from a cache
                    started = time.perf_counter()
                    memory.retrieve(ctx, query, 25)
                    times[name].append(1000.0 * (time.perf_counter() - started))
                    memory._embedder = documents
        for memory in memories.values():
            memory.close()
    return {
        n: {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95))}
        for n, v in times.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unit", default="turns", choices=("turns", "facts"))
    parser.add_argument("--presets", action="store_true", help="every service preset, both legs")
    parser.add_argument("--loco", action="store_true", help="grid + leave-one-conversation-out")
    parser.add_argument("--latency", choices=("files", "qdrant"), help="rrf-plain vs hybrid")
    parser.add_argument("--ceiling", action="store_true", help="recall of a perfect ranking")
    args = parser.parse_args(argv)
    if args.loco:
        return _loco_report()
    if args.latency:
        result = latency(args.latency)
        ratio = result["hybrid"]["p50"] / result["rrf-plain"]["p50"]
        for name, cell in result.items():
            print(f"{args.latency} {name:10s} p50 {cell['p50']:.1f} ms  p95 {cell['p95']:.1f} ms")
        print(f"hybrid / rrf-plain p50: {ratio:.2f}")
        return 0
    convs = load(args.unit)
    if args.ceiling:
        best = ceiling(convs)
        print(
            f"{args.unit}: perfect ranking R@5 / R@10 / R@25:",
            " / ".join(f"{best[k]:.3f}" for k in KS),
        )
        return 0
    from memory_service.config.retrieval import PRESETS

    print(f"{args.unit}: R@5 / R@10 / R@25, MRR")
    for name, config in PRESETS.items() if args.presets else [("hybrid", PRESETS["hybrid"])]:
        legs = all_legs(convs, date_terms=config.date_terms)
        for mode in ("bm25", "dense", "hybrid"):
            ranker = service_ranker(config, legs, mode=mode)
            print(f"{name:14s} {mode:7s}", evaluate(convs, ranker).row())
    return 0


def _loco_report() -> int:
    units = {unit: load(unit) for unit in ("turns", "facts")}
    configs = list(grid_configs())
    table = per_conv_table(units, configs)
    sizes = {unit: {c.id: len(c.gold) for c in convs} for unit, convs in units.items()}
    ids = list(sizes["turns"])
    ranked = sorted(
        table,
        key=lambda n: -np.mean([objective(pooled(table[n][u], sizes[u], ids)) for u in units]),
    )
    print("top configurations on all five conversations (turns | facts: R@5/10/25):")
    for name in ranked[:10]:
        cells = [pooled(table[name][u], sizes[u], ids) for u in units]
        print(f"  {name:34s}", " | ".join(" / ".join(f"{c[k]:.3f}" for k in KS) for c in cells))
    from memory_service.config.retrieval import PRESETS

    hybrid = PRESETS["hybrid"]
    best_leg = {}  # per unit and conversation: the better single leg at each k (dates on)
    for unit, convs in units.items():
        legs = all_legs(convs, date_terms=True)
        per_leg = [
            evaluate(convs, service_ranker(hybrid, legs, mode=leg)).per_conv
            for leg in ("bm25", "dense")
        ]
        best_leg[unit] = {c.id: {k: max(p[c.id][k] for p in per_leg) for k in KS} for c in convs}
    print("leave one conversation out (chosen on four, tested on the fifth), and the margin")
    print("over the better single leg on the fifth (turns | facts, k = 5 / 10 / 25):")
    held_out = {u: {k: 0.0 for k in KS} for u in units}
    margins = {u: {k: [] for k in KS} for u in units}
    for held, best, tested in loco(units, table):
        cells = []
        for u in units:
            margin = {k: tested[u][k] - best_leg[u][held][k] for k in KS}
            for k in KS:
                held_out[u][k] += tested[u][k] * sizes[u][held] / sum(sizes[u].values())
                margins[u][k].append(margin[k])
            cells.append(
                " / ".join(f"{tested[u][k]:.3f}" for k in KS)
                + " (+"
                + " +".join(f"{margin[k]:.3f}" for k in KS)
                + ")"
            )
        print(f"  {held}: {best:34s} " + " | ".join(cells))
    for u in units:
        pooled_row = " / ".join(f"{held_out[u][k]:.3f}" for k in KS)
        spread = " / ".join(f"{min(margins[u][k]):+.3f}..{max(margins[u][k]):+.3f}" for k in KS)
        print(f"  {u}: held-out recall {pooled_row}; margin over best leg {spread}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
