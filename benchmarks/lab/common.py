"""What every lab module shares: a benchmark's memories as score matrices, rankers built from
the service's own fusion, and the bench's metrics.

``memory-service bench`` records every memory into a fresh backend and asks every question
through ``retrieve``: faithful, but minutes per run. The lab loads the same datasets with the
bench's loaders (same items, metadata and gold), embeds every memory and question once (vectors
cached under ``--cache``, by default ``benchmarks/results/lab/``, git-ignored), scores the
lexical leg with the service's tokenizer and BM25 (``indexing``) and ranks with ``fuse_legs`` as a
backend does, so a table takes seconds; winners are then confirmed end to end with
``memory-service bench``. With the service's legs and vectors (``--legs service --vectors
service``) a row equals the bench's to the decimal (RESULTS.md, "Recall").

LoCoMo is read from ``--data`` (or ``$LOCOMO_DATA``) and never copied into the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from indexing.bm25 import BM25Index
from indexing.lexical import lexical_terms
from indexing.tokenize import tokenize
from memory_service.config.retrieval import RetrievalConfig
from memory_service.evaluation import metrics
from memory_service.evaluation.dataset import Dataset, MemoryItem
from memory_service.evaluation.datasets.locomo import load_locomo
from memory_service.evaluation.datasets.synthetic import DEFAULT_USERS, generate

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "benchmarks" / "results" / "lab"
DATA_ENV = "LOCOMO_DATA"
KS = (5, 10, 25)
TOP_K = 25  # what ``memory-service bench`` asks (max of its k, at least 10)
SETS = ("synthetic", "locomo-turns", "locomo-facts")


# -- command line ---------------------------------------------------------------------------


def add_arguments(
    parser: argparse.ArgumentParser, *, vectors: str = "service", sets: str | None = None
) -> None:
    """The arguments every lab module takes: where LoCoMo is, where vectors are cached, which
    embedder fills them, and (where a module compares sets) which sets."""
    parser.add_argument(
        "--data",
        type=Path,
        default=os.environ.get(DATA_ENV) or None,
        help=f"LoCoMo JSON (default ${DATA_ENV}); e.g. ../shared/data/locomo-dev.json",
    )
    parser.add_argument("--cache", type=Path, default=CACHE, help="vector cache folder")
    parser.add_argument(
        "--vectors",
        default=vectors,
        choices=("service", "bundled"),
        help="service: the embedder the service builds (ONNX by default); "
        f"bundled: the bundled model through sentence-transformers (default {vectors})",
    )
    parser.add_argument(
        "--synthetic-users", type=int, default=DEFAULT_USERS, help="users of the synthetic set"
    )
    if sets is not None:
        parser.add_argument("--sets", default=sets, help=f"comma-separated, of {','.join(SETS)}")


def vector_store(args: argparse.Namespace, embedder=None) -> VectorStore:
    """The cache ``args`` name, filled by ``embedder`` when given (tests) or the one chosen."""
    if args.vectors == "bundled":
        return VectorStore(args.cache / "vectors.npz", embedder, _bundled_embedder)
    return VectorStore(args.cache / "vectors-service.npz", embedder, _service_embedder)


def _bundled_embedder():
    from indexing.embeddings import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(num_threads=2)


def _service_embedder():
    from memory_service.config import load_settings
    from memory_service.services import build_embedder

    return build_embedder(load_settings())


# -- embeddings, cached on disk ---------------------------------------------------------------


class VectorStore:
    """Text -> normalised vector, computed once and kept in an .npz (keyed by a text hash)."""

    def __init__(self, path: Path, embedder=None, make_embedder: Callable | None = None) -> None:
        self.path = path
        self._vectors: dict[str, np.ndarray] = {}
        self._embedder = embedder
        self._make = make_embedder or _bundled_embedder
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
                self._embedder = self._make()
            vectors = self._embedder.embed(missing)
            for text, vector in zip(missing, vectors, strict=True):
                self._vectors[self._key(text)] = np.asarray(vector)
            self._save()
        return np.stack([self._vectors[self._key(t)] for t in texts]).astype(np.float32)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Questions embed as texts here, as the lab's own scoring embeds them (``embed``)."""
        return self.embed(texts)

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

        Documents are the text and day as ``lexical_terms`` indexes them unless ``doc_tokens``
        says otherwise."""
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


def convs_of(dataset: Dataset, store: VectorStore) -> list[Conv]:
    """The dataset's memories as lab conversations: one text recorded twice is one fact carrying
    both refs, and a newer fact with the same key closes the older one, as recording does."""
    out = []
    for c in dataset.conversations:
        if not c.questions:
            continue
        merged: dict[str, MemoryItem] = {}
        refs: dict[str, set[str]] = {}
        newest = {i.key: i for i in c.items if i.key}
        for item in c.items:
            if item.key and newest[item.key] is not item:
                continue
            key = " ".join(item.text.split()).casefold()
            merged.setdefault(key, item)
            refs.setdefault(key, set()).update(item.refs)
        items = list(merged.values())
        out.append(
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
    return out


def read_locomo(path: Path | None) -> list:
    """LoCoMo's samples from ``path``; a clear error when no path was given."""
    if path is None:
        raise SystemExit(f"LoCoMo: pass --data PATH or set ${DATA_ENV}")
    return json.loads(Path(path).read_text())


def load(
    unit: str, data: Path | None, store: VectorStore, *, turn_text: str = "speaker"
) -> list[Conv]:
    """LoCoMo's conversations of ``unit`` (turns or facts) as lab conversations."""
    return convs_of(load_locomo(read_locomo(data), unit=unit, turn_text=turn_text), store)


def load_sets(
    names: Sequence[str], data: Path | None, store: VectorStore, *, users: int = DEFAULT_USERS
) -> dict[str, list[Conv]]:
    """Each named set (``synthetic``, ``locomo-turns``, ``locomo-facts``) as conversations."""
    sets: dict[str, list[Conv]] = {}
    for name in names:
        if name == "synthetic":
            sets[name] = convs_of(generate(users), store)
        elif name in SETS:
            sets[name] = load(name.split("-")[1], data, store)
        else:
            raise SystemExit(f"unknown set {name!r}: choose from {', '.join(SETS)}")
    return sets


def sets_of(args: argparse.Namespace, embedder=None) -> dict[str, list[Conv]]:
    """The sets ``args.sets`` names, loaded as ``args`` says."""
    store = vector_store(args, embedder)
    return load_sets(args.sets.split(","), args.data, store, users=args.synthetic_users)


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

    def percent(self) -> list[float]:
        """R@5, R@10, R@25 and MRR in percent, one decimal (as RESULTS.md reports them)."""
        return [round(100 * self.recall[k], 1) for k in KS] + [round(100 * self.mrr, 1)]


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
    """Both legs' full score matrices for one conversation (rows: questions), and with the
    service's legs each memory's indexed terms (for query coverage)."""

    bm25: np.ndarray
    dense: np.ndarray
    terms: list[frozenset[str]] | None = None


def all_legs(convs: Sequence[Conv], *, date_terms: bool) -> dict[str, Legs]:
    """The lab's legs: BM25 over the memory's text (and day with ``date_terms``), cosine."""
    return {c.id: Legs(c.bm25(date_terms=date_terms), c.dense()) for c in convs}


def service_legs(convs: Sequence[Conv], config: RetrievalConfig) -> dict[str, Legs]:
    """The service's legs: BM25 over ``fact_terms`` (text, source message, day) as every backend
    indexes, with each memory's term set for query coverage."""
    from memory_service.longterm.fusion import fact_terms

    out = {}
    for c in convs:
        terms = [fact_terms(item.to_fact(), config) for item in c.items]
        bm25 = c.bm25(doc_tokens=lambda i, terms=terms: terms[i])
        out[c.id] = Legs(bm25, c.dense(), [frozenset(t) for t in terms])
    return out


def legs_for(convs: Sequence[Conv], config: RetrievalConfig, kind: str) -> dict[str, Legs]:
    """``service`` or ``lab`` legs for ``config``."""
    if kind == "service":
        return service_legs(convs, config)
    return all_legs(convs, date_terms=config.date_terms)


def leg_lists(conv: Conv, legs: Legs, row: int, depth: int, threshold: float = 0.0):
    """What a backend hands ``fuse_legs``: each leg's top ``depth`` as ``LegHit`` lists, with the
    memory's session and time (a lexical hit needs a shared term, a dense one the threshold);
    with service legs, each hit also carries the query terms its memory holds."""
    from memory_service.longterm.fusion import LegHit

    dense = np.where(legs.dense[row] >= threshold, legs.dense[row], -np.inf)
    held = legs.terms
    query = set(tokenize(conv.questions[row])) if held is not None else set()
    out = {}
    for leg, scores in (("bm25", legs.bm25[row]), ("dense", dense)):
        hits = [
            LegHit(str(i), float(scores[i]), conv.items[i].session_id, conv.items[i].created_at)
            for i in top(scores, depth)
        ]
        if held is not None:
            hits = [replace(h, matched=frozenset(query & held[int(h.id)])) for h in hits]
        out[leg] = hits
    return out


def ranker(
    config: RetrievalConfig,
    legs: Mapping[str, Legs],
    mode: str = "hybrid",
    *,
    top_k: int = TOP_K,
    third: Mapping[str, np.ndarray] | None = None,
) -> Ranker:
    """Rank with ``fuse_legs`` as a backend does for ``retrieve(top_k)``. With service legs the
    BM25 leg is scaled by query coverage as the service does; ``third`` (per conversation, a
    questions x memories matrix) is fused as a third leg of weight 1, a lab-only leg."""
    from memory_service.config import retrieval as strategy
    from memory_service.longterm.fusion import fuse_legs

    if third is not None:  # model_construct: a third leg is outside the strategy's Leg type
        weights = {**config.weights, "maxsim": 1.0}
        config = RetrievalConfig.model_construct(**{**config.model_dump(), "weights": weights})

    def rank(conv: Conv, row: int) -> list[int]:
        depth = config.depth(top_k)
        mine = legs[conv.id]
        hits = leg_lists(conv, mine, row, depth)
        terms = tokenize(conv.questions[row]) if mine.terms is not None else None
        if third is None:
            fused = fuse_legs(mode, hits, config, top_k, query_terms=terms)
            return [int(h.id) for h in fused]
        matrix = third[conv.id]
        hits["maxsim"] = leg_lists(conv, Legs(matrix, matrix, mine.terms), row, depth)["dense"]
        saved, strategy.LEGS = strategy.LEGS, (*strategy.LEGS, "maxsim")
        try:  # the lab only: fuse_legs fuses the legs ``LEGS`` names
            fused = fuse_legs(mode, hits, config, top_k, query_terms=terms)
        finally:
            strategy.LEGS = saved
        return [int(h.id) for h in fused]

    return rank


def table(
    sets: Mapping[str, list[Conv]],
    configs: Sequence[RetrievalConfig],
    modes: Sequence[str] = ("hybrid",),
    *,
    legs: str = "service",
) -> dict[str, dict[str, dict[str, Scores]]]:
    """R@5/10/25 and MRR of each config and mode on each set, printed and returned
    (set -> config name -> mode -> scores)."""
    out: dict[str, dict[str, dict[str, Scores]]] = {}
    for name, convs in sets.items():
        print(f"\n{name}: R@5 / R@10 / R@25  MRR", flush=True)
        cache: dict[tuple[bool, bool], dict[str, Legs]] = {}
        out[name] = {}
        for config in configs:
            key = (config.date_terms, config.source_terms)
            if key not in cache:
                cache[key] = legs_for(convs, config, legs)
            out[name][config.name] = {}
            for mode in modes:
                scores = evaluate(convs, ranker(config, cache[key], mode))
                out[name][config.name][mode] = scores
                print(f"  {config.name:34s} {mode:7s}", scores.row(), flush=True)
    return out
