"""multilingual-e5-small's encoder as an ONNX graph, built from the package's file, no torch.

The graph takes the summed input embeddings (word + position + token type, gathered by the
embedder from the Q4_0 word table: 250k rows stay 4-bit on disk and out of the graph) and the
attention mask, and returns the last hidden state; it is the XLM-RoBERTa encoder (post-norm,
exact GELU). Its weight matrices run one of three ways:

- ``"int8"`` (the service's): the dequantized weights as symmetric int8 within 7 bits (±63),
  one scale per output column, in ``DynamicQuantizeMatMul`` (activations quantised per run to
  u8). x86 CPUs without VNNI multiply u8 by s8 adding each pair of products in 16 bits, which
  full-range weights saturate (255 × 127 × 2 > 32,767): their vectors drifted from the
  model's, so a close recall ranked one way on one CPU and another elsewhere; at ±63 no pair
  can, and every CPU computes the same integers. Except each layer's
  feed-forward output, whose input (the GELU's) has outliers that one int8 scale per run
  flattens: that matrix stays 4-bit (``MatMulNBits``, activations per block of 32). The fastest
  of the three, and close to the package engine's vectors text by text, where all-int8 drifted
  (``benchmarks/RESULTS.md``, "multilingual-e5-small as a second embedder").
- ``"q4"``: the 4-bit blocks as stored, in ``MatMulNBits`` (activations quantised per block of
  32, as the package's engine does): the package's vectors, but slower than float32 here.
- ``"fp32"``: dequantized to float32 ``MatMul``: the same weights in float arithmetic.

Building takes seconds; the result is cached by content (``indexing.onnx_cache``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

import numpy as np

from indexing.e5_file import Q4_BLOCK, E5File, dequantize

log = logging.getLogger(__name__)

OPSET = 17
GRAPH_FORMAT = "e5-encoder/opset17/v3"  # part of the cache key: a new graph, a new entry
INPUT, MASK, OUTPUT = "embeddings", "attention_mask", "last_hidden_state"
Weights = Literal["int8", "q4", "fp32"]
# per weights choice, the matrices (by their name in a layer) that run another way
OVERRIDES: dict[str, dict[str, Weights]] = {"int8": {"fo": "q4"}}
INT8_LIMIT = 63  # int8 weights within 7 bits: u8 x s8 pairs never saturate 16 bits
_MASKED = -10000.0  # added to a padded key's attention score (BERT's convention)


def _pack_nbits(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks ``(N, K / 32, 18)`` to ``MatMulNBits``' B ``(N, K / 32, 16)`` and scales
    ``(N * K / 32,)``: the same nibbles, re-paired as consecutive weights (low nibble first)
    where Q4_0 pairs weight ``j`` with ``j + 16``; the zero point is the default, 8."""
    nibbles = blocks[..., 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # weight order, 0..15
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    scales = blocks[..., :2].copy().view(np.float16).astype(np.float32).reshape(-1)
    return np.ascontiguousarray(packed), scales


def _int8_columns(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A float ``(out, in)`` weight matrix as symmetric int8 ``(in, out)`` within ±``INT8_LIMIT``
    (7 bits: see the module), one scale per output column (per-tensor scales moved the
    vectors too far: cosine 0.984 to the engine's)."""
    scales = np.abs(matrix).max(axis=1) / INT8_LIMIT
    scales[scales == 0] = 1.0
    quantized = np.clip(np.rint(matrix / scales[:, None]), -INT8_LIMIT, INT8_LIMIT)
    quantized = quantized.astype(np.int8)
    return np.ascontiguousarray(quantized.T), scales.astype(np.float32)


class _Graph:
    """Nodes and initializers, with fresh names."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.initializers: list = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, hint: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, kind: str, inputs: list[str], hint: str, domain: str = "", **attrs) -> str:
        from onnx import helper

        out = self.name(hint)
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, domain=domain, **attrs))
        return out


def build_encoder(
    model: E5File,
    *,
    weights: Weights = "int8",
    accuracy_level: int = 4,
    overrides: Mapping[str, Weights] | None = None,
) -> bytes:
    """The encoder of ``model`` as serialised ONNX (``INPUT``, ``MASK`` -> ``OUTPUT``).

    ``accuracy_level`` is ``MatMulNBits``' compute type for 4-bit matrices: 4 quantises the
    activations to int8 per block (the package engine's arithmetic, and the fastest), 0 keeps
    them float32. ``overrides``: matrix name (``q``, ``k``, ``v``, ``ao``, ``fi``, ``fo``) to
    the way it runs instead of ``weights`` (default: ``OVERRIDES``), for measurements."""
    from onnx import TensorProto, helper

    log.info("building the multilingual-e5-small ONNX graph from %s (once; cached)", model.path)
    hidden, heads = model.hidden, model.heads
    head_dim = hidden // heads
    g = _Graph()

    def linear(x: str, prefix: str, rows: int, columns: int) -> str:
        blocks = np.asarray(model.q4_blocks(f"{prefix}.w", rows))
        bias = g.const(f"{prefix}.b", model.floats(f"{prefix}.b"))
        chosen = OVERRIDES.get(weights, {}) if overrides is None else overrides
        kind = chosen.get(prefix.split(".")[-1], weights)
        if kind == "fp32":
            matrix = dequantize(blocks).reshape(rows, columns).T  # (in, out)
            y = g.op("MatMul", [x, g.const(f"{prefix}.w", np.ascontiguousarray(matrix))], prefix)
        elif kind == "int8":
            matrix, scales = _int8_columns(dequantize(blocks).reshape(rows, columns))
            zeros = np.zeros(rows, dtype=np.int8)
            return g.op(
                "DynamicQuantizeMatMul",
                [
                    x,
                    g.const(f"{prefix}.w", matrix),
                    g.const(f"{prefix}.s", scales),
                    g.const(f"{prefix}.z", zeros),
                    bias,
                ],
                prefix,
                domain="com.microsoft",
            )
        else:
            packed, scales = _pack_nbits(blocks)
            y = g.op(
                "MatMulNBits",
                [x, g.const(f"{prefix}.w", packed), g.const(f"{prefix}.s", scales)],
                prefix,
                domain="com.microsoft",
                K=columns,
                N=rows,
                bits=4,
                block_size=Q4_BLOCK,
                accuracy_level=accuracy_level,
            )
        return g.op("Add", [y, bias], f"{prefix}.add")

    def layer_norm(x: str, prefix: str) -> str:
        return g.op(
            "LayerNormalization",
            [
                x,
                g.const(f"{prefix}.w", model.floats(f"{prefix}.w")),
                g.const(f"{prefix}.b", model.floats(f"{prefix}.b")),
            ],
            prefix,
            axis=-1,
            epsilon=model.eps,
        )

    # the additive key mask, (batch, 1, 1, keys): 0 for a token, -10000 for padding
    mask = g.op("Cast", [MASK], "mask.float", to=TensorProto.FLOAT)
    mask = g.op("Sub", [g.const("one", np.array(1.0, np.float32)), mask], "mask.inv")
    mask = g.op("Mul", [mask, g.const("masked", np.array(_MASKED, np.float32))], "mask.add")
    mask = g.op("Unsqueeze", [mask, g.const("axes", np.array([1, 2], np.int64))], "mask.4d")
    split_heads = g.const("heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_heads = g.const("merged", np.array([0, 0, hidden], np.int64))
    scale = g.const("scale", np.array(1.0 / np.sqrt(head_dim), np.float32))

    x = layer_norm(INPUT, "emb.ln")
    for i in range(model.layers):
        p = f"l{i}"
        q, k, v = (
            g.op("Reshape", [linear(x, f"{p}.{n}", hidden, hidden), split_heads], f"{p}.{n}.h")
            for n in "qkv"
        )
        q = g.op("Transpose", [q], f"{p}.qt", perm=[0, 2, 1, 3])
        k = g.op("Transpose", [k], f"{p}.kt", perm=[0, 2, 3, 1])
        v = g.op("Transpose", [v], f"{p}.vt", perm=[0, 2, 1, 3])
        scores = g.op("Mul", [g.op("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scaled")
        probs = g.op("Softmax", [g.op("Add", [scores, mask], f"{p}.masked")], f"{p}.p", axis=-1)
        context = g.op(
            "Transpose", [g.op("MatMul", [probs, v], f"{p}.pv")], f"{p}.ct", perm=[0, 2, 1, 3]
        )
        context = g.op("Reshape", [context, merge_heads], f"{p}.c")
        attended = linear(context, f"{p}.ao", hidden, hidden)
        x = layer_norm(g.op("Add", [x, attended], f"{p}.res1"), f"{p}.aln")
        inner = linear(x, f"{p}.fi", model.intermediate, hidden)
        inner = g.op("Gelu", [inner], f"{p}.gelu", domain="com.microsoft")
        out = linear(inner, f"{p}.fo", hidden, model.intermediate)
        x = layer_norm(g.op("Add", [x, out], f"{p}.res2"), f"{p}.oln")
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT], name=OUTPUT))

    dims = ["batch", "tokens"]
    graph = helper.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [*dims, hidden]),
            helper.make_tensor_value_info(MASK, TensorProto.INT64, dims),
        ],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [*dims, hidden])],
        g.initializers,
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        producer_name="memory-service",
    )
    proto.ir_version = 8
    return proto.SerializeToString()
