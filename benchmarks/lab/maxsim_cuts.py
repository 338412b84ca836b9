"""Can the MaxSim leg fit a storage budget of 3x today's pooled vector and keep its recall?

MaxSim (``benchmarks.lab.late_interaction``) keeps one 384-d float32 vector per word piece of
a memory; it is worth storing only at <= 3x the pooled vector (1536 bytes), so <= 4608 bytes a
memory. Each cut here changes what a memory stores, by a rule fixed in advance, and reports the
stored bytes (kept word pieces x bytes per vector), recall with MaxSim in place of the pooled
dense leg and as a third leg, and the NumPy time to score one question against every memory of
its conversation. Questions are never cut (a query is not stored) except where a projection
needs them in the same space; nothing is fitted on questions: a projection and the word-piece
IDF of a conversation are fitted on the memories of the *other* conversations (leave one
conversation out), so no conversation's own memories choose its cut. Cuts within the budget
keep the turns gain (70.5 / 79.4 / 86.7 against the default's 67.1 / 76.1 / 83.0) but not a
facts one, and need a multivector store, so the service has no MaxSim leg (RESULTS.md, "MaxSim
under a storage cut").

    OMP_NUM_THREADS=1 python -m benchmarks.lab.maxsim_cuts --data ../shared/data/locomo-dev.json \
        --unit turns|facts [--legs service|lab] [--per-conv] [--only NAME] [--threads 1]

``--legs service`` (default) compares with today's default as the bench ranks it (source terms,
query coverage); ``--legs lab`` with the legs ``benchmarks.lab.variants``' MaxSim rows were
measured on, and prints those rows too.
"""

from __future__ import annotations

import argparse
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.lab.common import (
    KS,
    Conv,
    Ranker,
    add_arguments,
    all_legs,
    evaluate,
    load,
    ranker,
    service_legs,
    vector_store,
)
from benchmarks.lab.late_interaction import Tokens, maxsim_ranker, maxsim_scores, token_vectors
from indexing.tokenize import STOP_WORDS
from memory_service.config.retrieval import PRESETS

BUDGET = 3 * 384 * 4  # bytes per memory: 3x today's pooled float32 vector
DIM = 384


@dataclass(frozen=True)
class Cut:
    """What a memory stores: which word pieces, in how many dimensions, at what precision."""

    name: str
    drop_punct: bool = False  # word pieces of a word made only of punctuation/symbols
    drop_stop: bool = False  # word pieces of a word in the lexical index's stop-word list
    budget: int | None = None  # keep at most this many word pieces, the highest IDF first
    dims: int = DIM
    projection: str | None = None  # "pca" (fitted on other conversations' memories), "random"
    quant: str = "f32"  # "f32", "int8" (per-vector scale), "bin" (sign bit, 1 bit a value)

    def bytes_per_vector(self) -> int:
        if self.quant == "f32":
            return 4 * self.dims
        if self.quant == "int8":
            return self.dims + 4  # int8 codes and one float32 scale
        return -(-self.dims // 8)  # sign bits, packed


def cuts() -> list[Cut]:
    """The cuts measured. Budgets and dimensions come from the byte target (4608 bytes) and
    the units' mean word-piece counts, not from recall, except the PCA 64 d and no-punctuation
    PCA 128 d rows, chosen with the other rows' results in view."""
    p_s = {"drop_punct": True, "drop_stop": True}
    return [
        Cut("none: float32, 384 d, every word piece"),
        Cut("int8 (per-vector scale)", quant="int8"),
        Cut("int8, no punctuation", drop_punct=True, quant="int8"),
        Cut("int8, no stop words", drop_stop=True, quant="int8"),
        Cut("int8, no stop words/punctuation", **p_s, quant="int8"),
        Cut("int8, IDF budget 11 pieces", budget=11, quant="int8"),
        Cut("int8, no stop/punct, IDF budget 11", **p_s, budget=11, quant="int8"),
        Cut("int8, no stop/punct, PCA 192 d", **p_s, dims=192, projection="pca", quant="int8"),
        Cut("int8, no stop/punct, PCA 128 d", **p_s, dims=128, projection="pca", quant="int8"),
        Cut("int8, no stop/punct, PCA 64 d", **p_s, dims=64, projection="pca", quant="int8"),
        Cut("int8, PCA 128 d", dims=128, projection="pca", quant="int8"),
        Cut(
            "int8, no punctuation, PCA 128 d",
            drop_punct=True,
            dims=128,
            projection="pca",
            quant="int8",
        ),
        Cut(
            "int8, no stop/punct, random proj 128 d",
            **p_s,
            dims=128,
            projection="random",
            quant="int8",
        ),
        Cut("binary (sign), 384 d", quant="bin"),
        Cut("binary (sign), no stop/punct", **p_s, quant="bin"),
        Cut("binary (sign) after PCA rotation, 384 d", projection="pca", quant="bin"),
        Cut("binary after PCA rotation, no stop/punct", **p_s, projection="pca", quant="bin"),
    ]


# -- word pieces ---------------------------------------------------------------------------


@dataclass
class Pieces:
    """One text side of a conversation: every word piece's vector, id and word flags."""

    vectors: np.ndarray  # (pieces, 384) float32, unit rows
    starts: np.ndarray  # where each text's rows start
    ids: np.ndarray  # word-piece id of each row
    punct: np.ndarray  # row belongs to a word of punctuation/symbols only
    stop: np.ndarray  # row belongs to a stop word

    def spans(self) -> list[tuple[int, int]]:
        ends = np.append(self.starts[1:], len(self.vectors))
        return list(zip(self.starts.tolist(), ends.tolist(), strict=True))


def _tokenizer():
    from transformers import AutoTokenizer

    from indexing.embeddings import bundled_model_path

    return AutoTokenizer.from_pretrained(str(bundled_model_path()))


def _flags(tokenizer, texts: list[str]) -> tuple[list[np.ndarray], list[np.ndarray], list]:
    """Per text, without [CLS]/[SEP]: word-piece ids, punctuation and stop-word flags."""
    encoded = tokenizer(texts, truncation=True, max_length=256)
    ids, punct, stop = [], [], []
    for n in range(len(texts)):
        row = encoded["input_ids"][n][1:-1]
        words = encoded.word_ids(n)[1:-1]
        pieces = tokenizer.convert_ids_to_tokens(row)
        whole: dict[int, str] = {}
        for w, piece in zip(words, pieces, strict=True):
            whole[w] = whole.get(w, "") + piece.removeprefix("##")
        ids.append(np.array(row, dtype=np.int64))
        punct.append(np.array([_is_punct(whole[w]) for w in words], dtype=bool))
        stop.append(np.array([whole[w].casefold() in STOP_WORDS for w in words], dtype=bool))
    return ids, punct, stop


def _is_punct(word: str) -> bool:
    return all(unicodedata.category(c)[0] in "PS" for c in word)


def pieces(convs: Sequence[Conv], tokens: Tokens) -> dict[str, Pieces]:
    """Memories (``conv.id``) and questions (``conv.id + "?"``) of every conversation."""
    tokenizer = _tokenizer()
    out = {}
    for conv in convs:
        for key, texts in (
            (conv.id, [it.text for it in conv.items]),
            (f"{conv.id}?", conv.questions),
        ):
            vectors, starts = tokens[key]
            ids, punct, stop = _flags(tokenizer, texts)
            lengths = np.diff(np.append(starts, len(vectors)))
            assert [len(i) for i in ids] == lengths.tolist(), "word pieces do not line up"
            out[key] = Pieces(
                vectors, starts, np.concatenate(ids), np.concatenate(punct), np.concatenate(stop)
            )
    return out


# -- applying a cut ----------------------------------------------------------------------------


def _idf(memory_ids: Sequence[np.ndarray]) -> dict[int, float]:
    df = Counter(i for ids in memory_ids for i in set(ids.tolist()))
    n = len(memory_ids)
    return {i: float(np.log((n + 1) / (d + 0.5))) for i, d in df.items()}


def _fit(cut: Cut, others: np.ndarray, seed: int = 0) -> np.ndarray | None:
    """A (384, dims) projection: PCA of the other conversations' kept memory word pieces
    (uncentred: the directions that keep dot products best), or a fixed Gaussian one."""
    if cut.projection is None:
        return None
    if cut.projection == "random":
        rng = np.random.default_rng(seed)
        return (rng.standard_normal((DIM, cut.dims)) / np.sqrt(cut.dims)).astype(np.float32)
    _, _, vt = np.linalg.svd(others.astype(np.float64), full_matrices=False)
    return vt[: cut.dims].T.astype(np.float32)


def _quantise(cut: Cut, x: np.ndarray) -> np.ndarray:
    """What a memory's rows score as once stored (decoded back to float32)."""
    if cut.quant == "int8":
        scale = np.abs(x).max(axis=1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        return (np.round(x / scale).clip(-127, 127) * scale).astype(np.float32)
    if cut.quant == "bin":
        return (np.where(x >= 0, 1.0, -1.0) / np.sqrt(x.shape[1])).astype(np.float32)
    return x.astype(np.float32)


def _kept(cut: Cut, p: Pieces, idf: dict[int, float], top: float) -> list[np.ndarray]:
    """Per memory, the rows it keeps (at least one: its highest-IDF piece)."""
    out = []
    for a, b in p.spans():
        rows = np.arange(a, b)
        mask = np.ones(b - a, dtype=bool)
        if cut.drop_punct:
            mask &= ~p.punct[a:b]
        if cut.drop_stop:
            mask &= ~p.stop[a:b]
        weight = np.array([idf.get(int(i), top) for i in p.ids[a:b]])
        if not mask.any():
            mask[int(np.argmax(weight))] = True
        keep = rows[mask]
        if cut.budget is not None and len(keep) > cut.budget:
            order = np.lexsort((keep, -weight[mask]))[: cut.budget]
            keep = np.sort(keep[order])
        out.append(keep)
    return out


@dataclass
class Applied:
    """A cut applied to every conversation: what is stored and what it scores."""

    stored: dict[str, tuple[np.ndarray, np.ndarray]]  # decoded rows and where memories start
    queries: dict[str, list[np.ndarray]]  # each question's word-piece rows, projected
    bytes_per_memory: float
    pieces_per_memory: float

    def score(self, cid: str, row: int) -> np.ndarray:
        stored, starts = self.stored[cid]
        return np.maximum.reduceat(self.queries[cid][row] @ stored.T, starts, axis=1).mean(axis=0)

    def scores(self) -> dict[str, np.ndarray]:
        """Per conversation, questions x memories."""
        return {
            cid: np.stack([self.score(cid, r) for r in range(len(q))]).astype(np.float64)
            for cid, q in self.queries.items()
        }


def apply(cut: Cut, convs: Sequence[Conv], side: dict[str, Pieces]) -> Applied:
    kept = {}
    for conv in convs:
        others = [side[c.id] for c in convs if c.id != conv.id]
        idf = _idf([p.ids[a:b] for p in others for a, b in p.spans()])
        kept[conv.id] = _kept(cut, side[conv.id], idf, max(idf.values()))
    counts = [len(k) for c in convs for k in kept[c.id]]
    stored, queries = {}, {}
    for conv in convs:
        fit_rows = np.concatenate(
            [side[c.id].vectors[np.concatenate(kept[c.id])] for c in convs if c.id != conv.id]
        )
        projection = _fit(cut, fit_rows)
        memory = side[conv.id].vectors[np.concatenate(kept[conv.id])]
        asked = side[f"{conv.id}?"]
        q_vectors = asked.vectors
        if projection is not None:
            memory, q_vectors = memory @ projection, q_vectors @ projection
        starts = np.cumsum([0] + [len(k) for k in kept[conv.id][:-1]])
        stored[conv.id] = (np.ascontiguousarray(_quantise(cut, memory)), starts)
        queries[conv.id] = [np.ascontiguousarray(q_vectors[a:b]) for a, b in asked.spans()]
    return Applied(
        stored, queries, float(np.mean(counts)) * cut.bytes_per_vector(), float(np.mean(counts))
    )


def timings(convs: Sequence[Conv], applied: dict[str, Applied]) -> dict[str, list[float]]:
    """Milliseconds to score one question against every memory of its conversation, each cut
    (and today's pooled dense leg, ``pooled``) timed on the same question in turn, the order
    rotated every question, so load on a shared host falls on all alike."""
    names = ["pooled", *applied]
    times: dict[str, list[float]] = {n: [] for n in names}
    n = 0
    for conv in convs:
        docs = np.ascontiguousarray(conv.doc_vectors)
        for row, q in enumerate(conv.query_vectors):
            n += 1
            for name in names[n % len(names) :] + names[: n % len(names)]:
                started = time.perf_counter()
                if name == "pooled":
                    _ = docs @ q
                else:
                    applied[name].score(conv.id, row)
                times[name].append(1000.0 * (time.perf_counter() - started))
    return times


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, vectors="bundled")
    parser.add_argument("--unit", default="turns", choices=("turns", "facts"))
    parser.add_argument("--threads", type=int, help="torch threads if vectors must be computed")
    parser.add_argument("--only", help="run only cuts whose name contains this")
    parser.add_argument(
        "--per-conv", action="store_true", help="also each conversation's R@5/10/25 - default's"
    )
    parser.add_argument(
        "--legs",
        default="service",
        choices=("service", "lab"),
        help="service: today's default (source terms, query coverage); "
        "lab: the legs benchmarks.lab.variants' MaxSim rows were measured on",
    )
    args = parser.parse_args(argv)
    if args.threads:  # the lab's embedder asks for 2 threads; a shared host wants fewer
        import indexing.embeddings as embeddings

        configure = embeddings.configure_threads
        embeddings.configure_threads = lambda _n: configure(args.threads)
    hybrid = PRESETS["hybrid"]
    convs = load(args.unit, args.data, vector_store(args, embedder))
    tokens = token_vectors(convs, args.unit, args.cache, embedder)
    side = pieces(convs, tokens)
    legs = all_legs(convs, date_terms=True) if args.legs == "lab" else service_legs(convs, hybrid)

    def ranked(scores: dict[str, np.ndarray] | None, replace_dense: bool = False) -> Ranker:
        if scores is None:
            return ranker(hybrid, legs)
        return maxsim_ranker(legs, scores, replace_dense=replace_dense)

    n_questions = sum(len(c.questions) for c in convs)
    print(f"{args.unit}: {n_questions} questions, {sum(len(c.items) for c in convs)} memories")
    print(f"legs: {args.legs}")
    default = evaluate(convs, ranked(None))
    print(f"  today's default hybrid: {default.row()}")
    if args.legs == "lab":  # the rows as benchmarks.lab.variants measures them
        full = maxsim_scores(convs, tokens)
        for name, replace_dense in (
            ("bm25 + MaxSim in place of dense", True),
            ("hybrid + MaxSim as a third leg", False),
        ):
            scores = evaluate(convs, ranked(full, replace_dense))
            print(f"  variants, {name}: {scores.row()}")
    chosen = [c for c in cuts() if not args.only or args.only in c.name]
    applied = {cut.name: apply(cut, convs, side) for cut in chosen}
    times = timings(convs, applied)

    def p(name: str) -> str:
        t = times[name]
        return f"{np.percentile(t, 50):.2f} / {np.percentile(t, 95):.2f} ms"

    print(f"  pooled dense scoring p50 / p95: {p('pooled')}; budget {BUDGET} B a memory")
    print("cut | bytes/memory (pieces) | bm25+MaxSim(cut) | hybrid+MaxSim(cut) | scoring p50/p95")
    for cut in chosen:
        a = applied[cut.name]
        scores = a.scores()
        replace = evaluate(convs, ranked(scores, replace_dense=True))
        third = evaluate(convs, ranked(scores, replace_dense=False))
        mark = "ok " if a.bytes_per_memory <= BUDGET else "   "
        print(
            f"  {cut.name:44s} {mark}{a.bytes_per_memory:7.0f} B ({a.pieces_per_memory:4.1f})"
            f" | {replace.row()} | {third.row()} | {p(cut.name)}",
            flush=True,
        )
        if args.per_conv:
            for label, scored in (("in place of dense", replace), ("third leg", third)):
                cells = "  ".join(
                    f"{cid} "
                    + " ".join(
                        f"{100 * (scored.per_conv[cid][k] - default.per_conv[cid][k]):+.1f}"
                        for k in KS
                    )
                    for cid in scored.per_conv
                )
                print(f"      {label}, minus default: {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
