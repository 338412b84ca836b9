"""Turn a sentence-transformers Transformer module into ONNX bytes: the one place torch runs.

Called once per model (the result is cached by ``indexing.onnx_cache``), never while serving:
torch and transformers are imported inside ``export_onnx`` only. The graph maps
``input_ids``/``attention_mask`` (and ``token_type_ids`` where the model takes them) to the
last hidden state; pooling and normalisation stay in numpy, where they are read from the
model's own modules. ``quantize_int8`` derives the opt-in int8 variant from those bytes.
"""

from __future__ import annotations

import inspect
import io
import logging
import tempfile
import warnings
from pathlib import Path

from indexing.sentence_model import ModelLoadError, SentenceModelSpec

log = logging.getLogger(__name__)

OPSET = 17
EXPORT_FORMAT = f"st-transformer-hidden-state/opset{OPSET}/v1"  # part of the cache key
OUTPUT = "last_hidden_state"


def export_onnx(spec: SentenceModelSpec) -> bytes:
    """The model's Transformer as ONNX with dynamic batch and sequence axes."""
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise ModelLoadError(
            f"exporting to ONNX needs torch and transformers ({exc}); install them once, "
            "or use the torch backend"
        ) from exc
    log.info("exporting %s to ONNX (once; the result is cached)", spec.transformer_dir)
    transformers_logging.disable_progress_bar()
    try:
        # eager attention traces to plain MatMul/Softmax; sdpa's tracing bakes in Python branches
        model = AutoModel.from_pretrained(str(spec.transformer_dir), attn_implementation="eager")
    except Exception as exc:  # safetensors, torch and transformers each raise their own
        raise ModelLoadError(f"transformers cannot load {spec.transformer_dir}: {exc}") from exc
    model.eval()
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        names.append("token_type_ids")

    class HiddenState(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    ids = torch.tensor([[101, 2023, 2003, 102], [101, 2023, 102, 0]], dtype=torch.int64)
    ids = ids.clamp(max=int(model.config.vocab_size) - 1)
    example = [ids, (ids != 0).to(torch.int64), torch.zeros_like(ids)][: len(names)]
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, OUTPUT]}
    buffer = io.BytesIO()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer chatter about constant Python branches
            torch.onnx.export(
                HiddenState(model),
                tuple(example),
                buffer,
                input_names=names,
                output_names=[OUTPUT],
                dynamic_axes=axes,
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
    except Exception as exc:  # torch raises many kinds here; all mean "cannot export"
        raise ModelLoadError(f"torch cannot export {spec.transformer_dir} to ONNX: {exc}") from exc
    return buffer.getvalue()


def quantize_int8(fp32: bytes) -> bytes:
    """Dynamic int8 quantisation of the weights (activations stay float): smaller and faster,
    but the vectors move (cosine ~0.96 to fp32 here), so it is opt-in."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # the onnx package is what is usually missing
        raise ModelLoadError(f"int8 quantisation needs onnx and onnxruntime ({exc})") from exc
    with tempfile.TemporaryDirectory(prefix="memory-onnx-") as tmp:
        source, target = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        source.write_bytes(fp32)
        try:
            quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
        except Exception as exc:  # onnx/onnxruntime raise their own kinds
            raise ModelLoadError(f"int8 quantisation failed: {exc}") from exc
        return target.read_bytes()
