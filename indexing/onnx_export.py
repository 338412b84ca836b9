"""Turn a sentence-transformers Transformer module into ONNX bytes: the one place torch runs.

Called once per model (the result is cached by ``indexing.onnx_cache``), and always in a child
process (``python -m indexing.onnx_export``): the serving process never imports torch, not even
on the start that exports, so its memory and imports stay those of onnxruntime. The graph maps
``input_ids``/``attention_mask`` (and ``token_type_ids`` where the model takes them) to the
last hidden state; pooling and normalisation stay in numpy, where they are read from the
model's own modules. ``quantize_int8`` derives the opt-in int8 variant from those bytes.
"""

from __future__ import annotations

import argparse
import inspect
import io
import logging
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from indexing.sentence_model import ModelLoadError, SentenceModelSpec, read_model_spec

log = logging.getLogger(__name__)

OPSET = 17
EXPORT_FORMAT = f"st-transformer-hidden-state/opset{OPSET}/v1"  # part of the cache key
OUTPUT = "last_hidden_state"
CHILD_S = 900  # an export takes seconds; a child that hangs must not hang the start


def _in_child(*argv: str) -> bytes:
    """Run this module's command line in a fresh interpreter; its output file's bytes."""
    root = str(Path(__file__).resolve().parent.parent)  # where ``indexing`` is importable from
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="memory-onnx-") as tmp:
        target = Path(tmp) / "model.onnx"
        command = [sys.executable, "-m", "indexing.onnx_export", *argv, str(target)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, check=False, timeout=CHILD_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ModelLoadError(f"the export process failed: {exc}") from exc
        if done.returncode != 0 or not target.is_file():
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise ModelLoadError(lines[-1] if lines else f"the export exited {done.returncode}")
        return target.read_bytes()


def export_onnx(spec: SentenceModelSpec) -> bytes:
    """The model's Transformer as ONNX bytes, exported by a child process (it imports torch)."""
    log.info("exporting %s to ONNX (once; the result is cached)", spec.transformer_dir)
    return _in_child("export", str(spec.root))


def quantize_int8(fp32: bytes) -> bytes:
    """Dynamic int8 quantisation of the weights (activations stay float): smaller and faster,
    but the vectors move (cosine ~0.96 to fp32 here), so it is opt-in. In a child process too:
    the quantiser's imports (onnx) need not stay in the server."""
    with tempfile.TemporaryDirectory(prefix="memory-onnx-") as tmp:
        source = Path(tmp) / "fp32.onnx"
        source.write_bytes(fp32)
        return _in_child("quantize", str(source))


def export_here(spec: SentenceModelSpec) -> bytes:
    """The model's Transformer as ONNX with dynamic batch and sequence axes, in this process."""
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise ModelLoadError(
            f"exporting to ONNX needs torch and transformers ({exc}); install them once, "
            "or use the torch backend"
        ) from exc
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


def quantize_here(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of ``source`` into ``target``, in this process."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # the onnx package is what is usually missing
        raise ModelLoadError(f"int8 quantisation needs onnx and onnxruntime ({exc})") from exc
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    except Exception as exc:  # onnx/onnxruntime raise their own kinds
        raise ModelLoadError(f"int8 quantisation failed: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    """``export MODEL_DIR OUT`` or ``quantize IN OUT``; a failure's cause is stderr's last line."""
    parser = argparse.ArgumentParser(prog="python -m indexing.onnx_export")
    parser.add_argument("action", choices=("export", "quantize"))
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.action == "export":
            args.target.write_bytes(export_here(read_model_spec(args.source)))
        else:
            quantize_here(args.source, args.target)
    except ModelLoadError as exc:
        print(str(exc).replace("\n", " "), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
