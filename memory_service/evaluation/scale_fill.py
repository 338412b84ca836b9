"""``--fill-writers K``: the bulk of a scale run's users recorded by K processes at once, before
the timed record.

Why: a million facts recorded one batch after another takes hours on a small shared host,
most of it the recording process's own Python. The postgres backend takes writers in several
processes (its transactions and locks keep them apart), so the users before the timed ones
are recorded by K writer processes, each through the backend's own ``record`` (near-duplicate
lookup, dedup, rows, terms: all of it, with the vectors the bench embedded). Their rate is
reported as the fill's, never as the record rate: that is timed afterwards, one batch after
another, on the filled store.
"""

from __future__ import annotations

import atexit
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np

from memory_service.config.settings import Settings
from memory_service.evaluation.scale import _user, scale_facts
from memory_service.evaluation.scale_vectors import BankEmbedder, user_texts
from memory_service.observe.progress import Progress

# users a writer takes at a time: small enough for a steady progress line
CHUNK_USERS = 20

_writer: dict = {}


def _start(settings: Settings, bank: dict[str, np.ndarray], options: dict) -> None:
    """A writer process: the backend on the run's store (its schema), the bench's vectors."""
    from memory_service.evaluation.embedding import cold_embedder
    from memory_service.services.stores import build_longterm

    embedder = BankEmbedder(cold_embedder(settings))
    memory = build_longterm(settings, embedder)
    atexit.register(memory.close)
    _writer.update(memory=memory, embedder=embedder, bank=bank, options=options)


def _record(users: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Each ``(user, count)``'s facts recorded; the facts written and the texts missed."""
    memory, embedder, bank, o = (_writer[k] for k in ("memory", "embedder", "bank", "options"))
    written, missed = 0, embedder.misses
    for user, count in users:
        texts, _ = user_texts(user, count, o["distinct_users"], o["seed"])
        facts = scale_facts(texts, o["with_source"])
        keys = [f.searchable_text for f in facts]
        embedder.load(keys, np.stack([bank[k] for k in keys]))
        for start in range(0, len(facts), o["batch_size"]):
            memory.record(_user(user), facts[start : start + o["batch_size"]])
        embedder.clear()
        written += len(facts)
    return written, embedder.misses - missed


def fill(
    settings: Settings,
    users: Sequence[tuple[int, int]],
    bank: dict[str, np.ndarray],
    options: dict,
    *,
    writers: int,
    show: bool,
    label: str,
) -> dict:
    """``users`` (``(user, count)`` pairs) recorded into the store of ``settings`` by
    ``writers`` processes at once; the facts, seconds and rate of the whole fill."""
    chunks = [users[i : i + CHUNK_USERS] for i in range(0, len(users), CHUNK_USERS)]
    spawn = multiprocessing.get_context("spawn")
    written = misses = 0
    began = time.perf_counter()
    with (
        Progress(len(users), f"scale: fill {label}, {writers} writers", enabled=show) as bar,
        ProcessPoolExecutor(
            max_workers=writers,
            mp_context=spawn,
            initializer=_start,
            initargs=(settings, bank, options),
        ) as pool,
    ):
        pending = {pool.submit(_record, chunk): len(chunk) for chunk in chunks}
        for done in as_completed(pending):
            facts, missed = done.result()
            written += facts
            misses += missed
            bar.update(pending[done])
    seconds = time.perf_counter() - began
    return {
        "users": len(users),
        "facts": written,
        "writers": writers,
        "seconds": seconds,
        "per_s": written / seconds if seconds > 0 else None,
        "embedder_misses": misses,
    }
