"""What a benchmark result says about the machine it ran on: versions, threads, and the load
average (other work on the machine skews latency, so every result file records it)."""

from __future__ import annotations

import os
import platform
import sys


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on every platform
        return None


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def environment(
    embedder_name: str, backend: str, load_at_start: list[float] | None, settings
) -> dict:
    """Versions and threads; torch is not imported here (an onnx run never loads it)."""
    torch = sys.modules.get("torch")
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": _version("torch"),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "onnxruntime": _version("onnxruntime"),
        "embedding_backend": backend,
        "embedding_threads": settings.embedding.threads,
        "embedder": embedder_name,
        "load_average_start": load_at_start,  # other work on the machine skews latency
        "load_average_end": load_average(),
    }
