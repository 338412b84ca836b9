"""What the client-side benchmarks share: a workspace filled in-process with the scale bench's
synthetic facts (fixed seed), a real ``memory-service serve`` on a copy of it, and latency
summaries. The copy is what lets one run time the same recall in-process and through the
client: an Edge folder is owned by one process, and the files backend's derived index is
per process, so the server gets its own copy of identical facts and ids.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.server import ServerProcess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TENANT = "bench"
BACKENDS = ("files", "qdrant")  # qdrant: Qdrant Edge under <workspace>/qdrant


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(ms: Sequence[float]) -> dict[str, float | int]:
    """Median, p95 and p99 of ``ms`` (milliseconds), and how many."""
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 2),
        "p95_ms": round(percentile(ms, 0.95), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
    }


def user_id(index: int) -> str:
    return f"user-{index}"


def texts(users: int, facts: int, *, seed: int = 7) -> dict[int, tuple[list[str], list[str]]]:
    """Per user: ``facts`` fact texts and the questions about them."""
    from memory_service.evaluation.datasets.synthetic import scale_texts

    return {u: scale_texts(u, facts, seed=seed) for u in range(users)}


def settings_for(workspace: Path, backend: str, **overrides: Any):
    """The settings ``serve`` reads from ``ServerProcess``'s environment, in-process."""
    from memory_service.config import load_settings

    return load_settings(
        workspace=workspace,
        longterm={"backend": backend},
        embedding={"threads": 1},
        **overrides,
    )


def fill(workspace: Path, backend: str, corpus: dict[int, tuple[list[str], list[str]]]) -> None:
    """Record every user's facts in-process (batched, as the scale bench does), then close."""
    from memory_service.domain.context import RuntimeContext
    from memory_service.domain.facts import Fact
    from memory_service.services import build_services

    services = build_services(settings_for(workspace, backend))
    try:
        for user, (facts, _) in corpus.items():
            ctx = RuntimeContext(TENANT, user_id(user))
            for start in range(0, len(facts), 200):
                services.longterm.record(ctx, [Fact(t) for t in facts[start : start + 200]])
    finally:
        services.close()


@dataclass
class Served:
    base_url: str
    key: str
    server: ServerProcess


@contextmanager
def serve_copy(workspace: Path, copy: Path, backend: str, **env: str) -> Iterator[Served]:
    """``serve`` on a copy of ``workspace`` with a fresh user key of ``TENANT``."""
    from memory_service.stores.api_keys.files import FilesKeyStore

    shutil.copytree(workspace, copy)
    keys_file = copy / "api-keys.json"
    key = FilesKeyStore(keys_file).add(TENANT, "user")
    server = ServerProcess(copy, keys_file, backend=backend, env=dict(env))
    server.start()
    try:
        yield Served(server.base_url, key, server)
    finally:
        server.stop()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
