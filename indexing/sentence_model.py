"""What a sentence-transformers model directory says about itself, read without importing it.

The ONNX embedder reproduces the model's own modules (``modules.json``): a Transformer, then a
Pooling, then optionally Normalize. This module reads their configuration files exactly where
sentence-transformers reads them, so the serving path needs neither torch nor
sentence-transformers, and refuses a model whose modules it cannot reproduce rather than
embedding it differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# sentence-transformers' legacy pooling keys, in its order (several modes are concatenated).
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens")  # the ones reproduced here
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_HUGE = 1_000_000  # tokenizers without a real limit say model_max_length = 1e30


class ModelLoadError(ValueError):
    """The model directory cannot be embedded by this backend; the message says why."""


@dataclass(frozen=True)
class SentenceModelSpec:
    """The parts of a sentence-transformers model the ONNX embedder needs."""

    root: Path  # the model directory
    transformer_dir: Path  # the Transformer module's folder (usually ``root``)
    max_seq_length: int  # tokens, special tokens included, as sentence-transformers truncates
    do_lower_case: bool
    pooling: tuple[str, ...]  # concatenated in this order, as sentence-transformers does
    dimension: int
    pad_token: str
    truncation_side: str

    @property
    def tokenizer_file(self) -> Path:
        return self.transformer_dir / "tokenizer.json"

    def weight_files(self) -> list[Path]:
        """The files the exported network depends on: its config and its weights."""
        files = [self.transformer_dir / "config.json"]
        files += [
            self.transformer_dir / n for n in WEIGHT_FILES if (self.transformer_dir / n).is_file()
        ]
        return files


def _json(path: Path, default: Any = None) -> Any:
    if not path.is_file():
        if default is not None:
            return default
        raise ModelLoadError(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path} is unreadable: {exc}") from exc


def _modules(root: Path) -> list[dict]:
    """``modules.json``, or what sentence-transformers assumes without one (mean pooling)."""
    path = root / "modules.json"
    if not path.is_file():
        return [{"type": "Transformer", "path": ""}, {"type": "Pooling", "path": None}]
    modules = _json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelLoadError(f"{path} is not a list of modules")
    return sorted(modules, key=lambda m: m.get("idx", 0))


def _kind(module: dict) -> str:
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def _pooling(module: dict, root: Path, hidden: int) -> tuple[tuple[str, ...], int]:
    if module.get("path") is None:
        return ("mean",), hidden
    config = _json(root / module["path"] / "config.json")
    if mode := config.get("pooling_mode"):  # the newer single-key form
        modes = tuple(mode) if isinstance(mode, list | tuple) else (str(mode),)
    else:  # legacy booleans; none set means mean, as sentence-transformers reads them
        modes = tuple(name for key, name in LEGACY_POOLING_KEYS.items() if config.get(key))
        modes = modes or ("mean",)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise ModelLoadError(f"pooling mode {unknown} is not supported by the onnx backend")
    width = int(config.get("word_embedding_dimension", hidden))
    return modes, width * len(modes)


def _max_seq_length(sbert: dict, tokenizer_config: dict, config: dict) -> int:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's, else the positions."""
    positions = int(config.get("max_position_embeddings", 512))
    for value in (sbert.get("max_seq_length"), tokenizer_config.get("model_max_length")):
        if isinstance(value, int | float) and 0 < value < _HUGE:
            return int(value)
    return positions


def _token(value: Any, fallback: str) -> str:
    if isinstance(value, dict):  # an AddedToken written out
        value = value.get("content")
    return value if isinstance(value, str) and value else fallback


def read_model_spec(root: Path) -> SentenceModelSpec:
    """Read ``root``'s modules; ``ModelLoadError`` for anything we would embed differently."""
    if not root.is_dir():
        raise ModelLoadError(f"{root} is not a directory")
    modules = _modules(root)
    kinds = [_kind(m) for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ModelLoadError(
            f"modules {kinds} are not supported by the onnx backend "
            "(it runs Transformer, Pooling and optionally Normalize)"
        )
    transformer_dir = root / (modules[0].get("path") or "")
    config = _json(transformer_dir / "config.json")
    if not any((transformer_dir / n).is_file() for n in WEIGHT_FILES):
        raise ModelLoadError(f"{transformer_dir} has no weights ({' or '.join(WEIGHT_FILES)})")
    if not (transformer_dir / "tokenizer.json").is_file():
        raise ModelLoadError(f"{transformer_dir} has no tokenizer.json (a fast tokenizer)")
    sbert = _json(transformer_dir / "sentence_bert_config.json", {})
    tokenizer_config = _json(transformer_dir / "tokenizer_config.json", {})
    hidden = int(config.get("hidden_size", 0))
    pooling, dimension = _pooling(modules[1], root, hidden)
    if dimension <= 0:
        raise ModelLoadError(f"{transformer_dir / 'config.json'} names no hidden_size")
    return SentenceModelSpec(
        root=root,
        transformer_dir=transformer_dir,
        max_seq_length=_max_seq_length(sbert, tokenizer_config, config),
        do_lower_case=bool(sbert.get("do_lower_case", False)),
        pooling=pooling,
        dimension=dimension,
        pad_token=_token(tokenizer_config.get("pad_token"), "[PAD]"),
        truncation_side=str(tokenizer_config.get("truncation_side", "right")),
    )
