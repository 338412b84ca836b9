"""A sentence-transformers model on ONNX Runtime: same vectors as torch, without torch.

The serving path imports onnxruntime, tokenizers and numpy only. The model's Transformer is
exported to ONNX once (``indexing.onnx_export``, the only code that imports torch) and cached
by content (``indexing.onnx_cache``); tokenisation uses the model's own ``tokenizer.json`` with
its truncation window, and pooling and normalisation follow its modules
(``indexing.sentence_model``), so the vectors match sentence-transformers' to float precision.
``quantize=True`` serves a dynamically int8-quantised copy instead: faster and smaller, but its
vectors move enough to change rankings, so it is opt-in and has its own name (and so its own
on-disk vector caches).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexing.embeddings import (
    BUNDLED_MODEL,
    INT8_SUFFIX,
    bundled_model_path,
    default_threads,
    limit_blas_threads,
    normalise_rows,
)
from indexing.onnx_cache import OnnxCache, default_cache_dir, files_digest
from indexing.onnx_export import EXPORT_FORMAT, OUTPUT, export_onnx, quantize_int8
from indexing.padding import padding_plan
from indexing.sentence_model import ModelLoadError, SentenceModelSpec, read_model_spec


def model_directory(model: str) -> Path:
    """The folder of ``model``: the bundled model or a local path."""
    return bundled_model_path() if model == BUNDLED_MODEL else Path(model).expanduser()


def cached_model(spec: SentenceModelSpec, cache: OnnxCache, *, quantize: bool) -> Path:
    """The verified fp32 (or int8) ONNX file of ``spec``, exported on a cache miss."""
    key = files_digest(spec.weight_files(), spec.transformer_dir, salt=EXPORT_FORMAT)
    fp32_key = f"{key}-fp32"

    def fp32() -> Path:
        return cache.get_or_build(fp32_key, lambda: export_onnx(spec))

    if not quantize:
        return fp32()
    return cache.get_or_build(f"{key}-int8", lambda: quantize_int8(fp32().read_bytes()))


@functools.lru_cache(maxsize=8)
def _tokenizer(spec: SentenceModelSpec):
    """The model's fast tokenizer, truncating as sentence-transformers calls it:
    ``truncation="longest_first"`` at ``max_seq_length`` (special tokens included). It does not
    pad: ``OnnxEmbedder`` pads each run to its own longest text (``indexing.padding``). One per
    spec in a process, as the session is: reading its file costs ~30 ms, and it encodes from
    several threads at once."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(spec.tokenizer_file))
    except Exception as exc:  # tokenizers raises its own Exception type
        raise ModelLoadError(f"cannot read {spec.tokenizer_file}: {exc}") from exc
    tokenizer.enable_truncation(
        max_length=spec.max_seq_length,
        strategy="longest_first",
        direction=spec.truncation_side,
    )
    tokenizer.no_padding()
    return tokenizer


def inference_session(model_file: Path, threads: int):
    """The model's inference session, one per (file, stamp, threads) in a process: creating
    it costs ~0.7 s (measured on the 2-core dev machine), and a session may run from several
    threads at once."""
    st = model_file.stat()
    return _loaded_session(str(model_file), (st.st_size, st.st_mtime_ns, st.st_ino), threads)


@functools.lru_cache(maxsize=8)
def _loaded_session(model_file: str, _stamp: tuple[int, int, int], threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # every batch has its own (size, length) shape: a memory pattern planned per shape only
    # accumulates (measured: ~40 MB less after a few hundred batches without it)
    options.enable_mem_pattern = False
    options.log_severity_level = 3  # errors only
    try:
        return ort.InferenceSession(model_file, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own kinds
        raise ModelLoadError(f"onnxruntime cannot load the exported model: {exc}") from exc


def pool(hidden: np.ndarray, mask: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """Token states (batch, tokens, dim) to one row per text, mode by mode, concatenated;
    the arithmetic of sentence-transformers' Pooling module."""
    weights = mask[..., None].astype(np.float32)
    out = []
    for mode in modes:
        if mode == "cls":
            first = mask.argmax(axis=1)
            out.append(hidden[np.arange(len(hidden)), first])
        elif mode == "max":
            out.append(np.where(weights > 0, hidden, -np.inf).max(axis=1))
        else:
            total = (hidden * weights).sum(axis=1)
            count = np.clip(weights.sum(axis=1), 1e-9, None)
            out.append(total / (count if mode == "mean" else np.sqrt(count)))
    return np.concatenate(out, axis=1) if len(out) > 1 else out[0]


class OnnxEmbedder:
    """``Embedder`` running a sentence-transformers model directory on onnxruntime (CPU)."""

    def __init__(
        self,
        model: str = BUNDLED_MODEL,
        *,
        cache_dir: Path | None = None,
        threads: int | None = None,
        batch_size: int = 64,
        quantize: bool = False,
    ) -> None:
        limit_blas_threads()
        self._spec = read_model_spec(model_directory(model))
        self._tokenizer = _tokenizer(self._spec)
        self._pad_id = self._tokenizer.token_to_id(self._spec.pad_token) or 0
        model_file = cached_model(
            self._spec, OnnxCache(cache_dir or default_cache_dir()), quantize=quantize
        )
        self._session = inference_session(model_file, threads or default_threads())
        self._inputs = {i.name for i in self._session.get_inputs()}
        # fp32 vectors are torch's vectors: the same name; int8 ones are not
        self._name = f"{model}{INT8_SUFFIX}" if quantize else model
        self._batch_size = batch_size
        self._lock = threading.Lock()  # one inference at a time: its threads are the cores

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._spec.dimension

    @property
    def max_seq_length(self) -> int:
        return self._spec.max_seq_length

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids the model sees for each text (truncated, unpadded): for checks and tests."""
        prepared = [t.lower() if self._spec.do_lower_case else t for t in texts]
        return [self._tokenizer.encode(t).ids for t in prepared]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        prepared = [t.lower() if self._spec.do_lower_case else t for t in texts]
        encodings = self._tokenizer.encode_batch(prepared)  # truncated, not padded
        # longest first by tokens, cut into runs where the padding saved outweighs a run's
        # fixed cost: the model computes (almost) only real tokens
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        lengths = [len(encodings[i].ids) for i in order]
        for start, stop in padding_plan(lengths, self._batch_size):
            chosen = order[start:stop]
            out[chosen] = self._embed_batch([encodings[i] for i in chosen])
        return normalise_rows(out)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # sentence-transformers models here are symmetric

    def _embed_batch(self, encodings: list) -> np.ndarray:
        """One run over ``encodings``, longest first, right-padded to the first one's length
        (what the tokenizer's own padding would give)."""
        width = len(encodings[0].ids)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            size = len(encoding.ids)
            ids[row, :size] = encoding.ids
            mask[row, :size] = encoding.attention_mask
            types[row, :size] = encoding.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = types
        with self._lock:
            (hidden,) = self._session.run([OUTPUT], feeds)
        return pool(hidden, mask, self._spec.pooling)
