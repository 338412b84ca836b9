"""Dataset loaders: each turns its source format into a ``Dataset``."""

from __future__ import annotations

import json
from pathlib import Path

from memory_service.evaluation.dataset import BenchInputError, Dataset

DATASETS: tuple[str, ...] = ("synthetic", "synthetic-zh", "locomo", "longmemeval")


def read_json(path: str | Path | None, dataset: str) -> object:
    """The parsed file, or a one-line ``BenchInputError`` saying what is wrong with it."""
    if path is None:
        raise BenchInputError(
            f"--dataset {dataset} needs --path FILE (public data is not shipped with the "
            "project; LoCoMo is CC BY-NC: data/locomo10.json of github.com/snap-research/LoCoMo)"
        )
    file = Path(path)
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchInputError(f"--path: no such file {str(file)!r}") from None
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"--path {str(file)!r}: cannot read it as JSON: {exc}") from exc


def load_dataset(
    name: str,
    *,
    path: str | Path | None = None,
    unit: str | None = None,
    users: int | None = None,
    seed: int = 7,
    turn_text: str = "speaker",
    with_source: bool = True,
) -> Dataset:
    """Load ``name`` (one of ``DATASETS``); ``unit`` None means the dataset's default;
    ``with_source``: record facts with their provenance where the data has it."""
    if name == "synthetic":
        from memory_service.evaluation.datasets import synthetic

        if unit not in (None, "facts"):
            raise BenchInputError("--dataset synthetic has one unit: facts")
        return synthetic.generate(users=users or synthetic.DEFAULT_USERS, seed=seed)
    if name == "synthetic-zh":
        from memory_service.evaluation.datasets import synthetic_zh

        if unit not in (None, "facts"):
            raise BenchInputError("--dataset synthetic-zh has one unit: facts")
        return synthetic_zh.generate(users=users or synthetic_zh.DEFAULT_USERS, seed=seed)
    if name == "locomo":
        from memory_service.evaluation.datasets import locomo

        return locomo.load_locomo(
            read_json(path, name),
            unit=unit or "turns",
            turn_text=turn_text,
            with_source=with_source,
        )
    if name == "longmemeval":
        from memory_service.evaluation.datasets import longmemeval

        return longmemeval.load_longmemeval(
            read_json(path, name), unit=unit or "turns", with_source=with_source
        )
    raise BenchInputError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
