"""MaxSim (ColBERT's late interaction) with the bundled model's token vectors, shared by
``variants`` (is it worth a leg?) and ``maxsim_cuts`` (can it fit a storage budget?).

Per question word piece, the best cosine over a memory's word pieces, averaged over the
question's pieces. Token vectors come from the bundled model's last layer, one unit vector per
word piece with [CLS]/[SEP] dropped, cached beside the lab's vectors (git-ignored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks.lab.common import TOP_K, Conv, Legs, Ranker, ranker
from memory_service.config.retrieval import PRESETS

Tokens = dict[str, tuple[np.ndarray, np.ndarray]]  # id -> (rows, where each text's rows start)


def sentence_model(embedder=None):
    """The sentence-transformers model inside ``embedder`` (unwrapping caches), or the
    bundled one."""
    if embedder is None:
        from indexing.embeddings import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(num_threads=2)
    while hasattr(embedder, "_inner"):
        embedder = embedder._inner
    return embedder._model


def token_vectors(convs: Sequence[Conv], unit: str, cache: Path, embedder=None) -> Tokens:
    """Per conversation: every memory's token vectors stacked in one matrix and where each
    memory's rows start (``conv.id``), the same for its questions (``conv.id + "?"``)."""
    path = cache / f"tokens-{unit}.npz"
    if path.exists():
        with np.load(path) as data:
            return {c.id: (data[f"{c.id}/v"], data[f"{c.id}/s"]) for c in convs} | {
                f"{c.id}?": (data[f"{c.id}/qv"], data[f"{c.id}/qs"]) for c in convs
            }
    model = sentence_model(embedder)

    def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = model.encode(texts, output_value="token_embeddings", batch_size=64)
        pieces = [t.cpu().numpy()[1:-1] for t in out]
        pieces = [p / np.linalg.norm(p, axis=1, keepdims=True) for p in pieces]
        starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
        return np.concatenate(pieces).astype(np.float32), starts

    arrays = {}
    out: Tokens = {}
    for conv in convs:
        out[conv.id] = encode([it.text for it in conv.items])
        out[f"{conv.id}?"] = encode(conv.questions)
        arrays[f"{conv.id}/v"], arrays[f"{conv.id}/s"] = out[conv.id]
        arrays[f"{conv.id}/qv"], arrays[f"{conv.id}/qs"] = out[f"{conv.id}?"]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return out


def maxsim_scores(convs: Sequence[Conv], tokens: Tokens) -> dict[str, np.ndarray]:
    """Per conversation, the MaxSim score of every question (rows) with every memory."""
    out = {}
    for conv in convs:
        vectors, starts = tokens[conv.id]
        q_vectors, q_starts = tokens[f"{conv.id}?"]
        ends = np.append(q_starts[1:], len(q_vectors))
        out[conv.id] = np.stack(
            [
                np.maximum.reduceat(q_vectors[a:b] @ vectors.T, starts, axis=1).mean(axis=0)
                for a, b in zip(q_starts, ends, strict=True)
            ]
        )
    return out


def maxsim_ranker(
    legs: Mapping[str, Legs], scores: Mapping[str, np.ndarray], *, replace_dense: bool
) -> Ranker:
    """``hybrid`` with MaxSim ``scores`` in place of the pooled dense leg, or as a third leg of
    the z-score fusion (weight 1)."""
    hybrid = PRESETS["hybrid"]
    if replace_dense:
        swapped = {cid: Legs(legs[cid].bm25, scores[cid], legs[cid].terms) for cid in scores}
        return ranker(hybrid, swapped)
    return ranker(hybrid, legs, third=scores)


def maxsim_alone(tokens: Tokens) -> Ranker:
    """The MaxSim leg by itself, over every memory."""

    def rank(conv: Conv, row: int) -> list[int]:
        vectors, starts = tokens[conv.id]
        q_vectors, q_starts = tokens[f"{conv.id}?"]
        end = q_starts[row + 1] if row + 1 < len(q_starts) else len(q_vectors)
        sim = q_vectors[q_starts[row] : end] @ vectors.T
        score = np.maximum.reduceat(sim, starts, axis=1).mean(axis=0)
        return [int(i) for i in np.argsort(-score, kind="stable")[: TOP_K * 4]]

    return rank
