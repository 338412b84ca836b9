"""``--scale N --backends files,qdrant,postgres``: one scale run per backend, each backend in a
process of its own, driven in turns.

Runs minutes apart compare the host more than the backends, and one process holding all of
them mixes their memory. So each backend is a child process (its own service, model, peak RSS
and size on disk) and this process drives them: user by user, every backend records that
user's batch, who goes first rotating; then each question is asked of every backend in every
mode, in-process then over HTTP, who goes first rotating. Each child times its own calls, so
the hand-off between processes is not in any figure.

The document vectors come from ``scale_vectors``: embedded once here before the record, and
handed to each child with its batch, so a record's time is the backend's own work; the
model's rate on the same texts is reported beside it (``embedding``). With
``--distinct-users N`` users past the first N record the texts of user ``u mod N`` (their own
user ids, so every fact, lookup and row is their own).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from memory_service.config.settings import Settings
from memory_service.domain.errors import MemoryServiceError
from memory_service.evaluation import metrics
from memory_service.evaluation.backends import settings_for, with_backend
from memory_service.evaluation.dataset import BenchInputError
from memory_service.evaluation.machine import load_average
from memory_service.evaluation.memory_use import PeakPss, peak_rss_mb
from memory_service.evaluation.runner import WARM_UP_QUERY
from memory_service.evaluation.scale import (
    _access_log_to,
    _counts,
    _fresh_schema,
    _http_client,
    _latency,
    _mode_of,
    _search_over_http,
    _user,
    database_mb,
    scale_facts,
)
from memory_service.evaluation.scale_vectors import BankEmbedder, embed_distinct, user_texts
from memory_service.observe.progress import Progress

log = logging.getLogger("memory_service.evaluation")

BACKEND_CHOICES = ("files", "qdrant", "postgres")


def folder_mb(root: Path) -> float:
    """What the files under ``root`` take on disk (allocated blocks), in MB."""
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:  # gone meanwhile
                continue
    return round(total / 1e6, 1)


# --- the child: one backend, answering the driver's commands ---------------------------------


class _Backend:
    """One backend's service in this process, and its timings so far."""

    def __init__(self, settings: Settings, options: dict, stack: ExitStack) -> None:
        from memory_service.evaluation.embedding import cold_embedder
        from memory_service.services.container import build_services

        self.options = options
        self.peak_pss = stack.enter_context(PeakPss())
        self.tmp = Path(
            stack.enter_context(
                tempfile.TemporaryDirectory(prefix="memory-scale-", dir=options["workdir"])
            )
        )
        self.settings = stack.enter_context(_fresh_schema(settings_for(settings, self.tmp)))
        self.embedder = BankEmbedder(cold_embedder(self.settings))
        self.services = build_services(self.settings, embedder=self.embedder)
        self.stack = stack
        self.record_s = 0.0
        self.first_ms: list[float] = []
        self.timings: dict[tuple[str, str], list[float]] = {}
        self.clients: dict = {}
        self.http_error: str | None = None

    def record(self, user: int, count: int, vectors) -> float:
        o = self.options
        texts, _ = user_texts(user, count, o["distinct_users"], o["seed"])
        facts = scale_facts(texts, o["with_source"])
        self.embedder.load([f.searchable_text for f in facts], vectors)
        spent = 0.0
        try:
            for start in range(0, len(facts), o["batch_size"]):
                batch = facts[start : start + o["batch_size"]]
                began = time.perf_counter()
                self.services.longterm.record(_user(user), batch)
                spent += time.perf_counter() - began
        finally:
            self.embedder.clear()
        self.record_s += spent
        return spent

    def run_settings(self) -> Settings:
        """The settings of this backend's store (its workspace, its schema): for the fill."""
        return self.settings

    def warm(self, user: int) -> None:
        """The user's first retrieve in every mode (it builds that user's index), timed."""
        began = time.perf_counter()
        for mode in self.options["modes"]:
            plain, _ = _mode_of(mode)
            self.services.longterm.retrieve(_user(user), WARM_UP_QUERY, 1, mode=plain)
        self.first_ms.append(1000.0 * (time.perf_counter() - began))

    def serve(self) -> None:
        try:
            self.stack.enter_context(_access_log_to(self.tmp / "access.jsonl"))
            self.clients["http"] = self.stack.enter_context(_http_client(self.services, self.tmp))
        except Exception as exc:  # keep the in-process figures
            log.exception("scale: the HTTP server did not come up")
            self.http_error = f"{type(exc).__name__}: {exc}"

    def query(self, user: int, question: str, http_first: bool) -> None:
        top_k = self.options["top_k"]
        self.embedder.mark_queries([question])
        for mode in self.options["modes"]:
            plain, fact_filter = _mode_of(mode)
            timed = [("in_process", None), *self.clients.items()]
            if http_first:
                timed.reverse()
            for path, client in timed:
                began = time.perf_counter()
                if client is None:
                    self.services.longterm.retrieve(
                        _user(user), question, top_k, mode=plain, filter=fact_filter
                    )
                else:
                    try:
                        _search_over_http(client, user, question, mode, top_k)
                    except Exception as exc:  # keep the in-process figures of a long run
                        log.exception("scale: HTTP measurement failed; in-process only")
                        self.http_error, self.clients = f"{type(exc).__name__}: {exc}", {}
                        continue
                spent = 1000.0 * (time.perf_counter() - began)
                self.timings.setdefault((path, mode), []).append(spent)

    def finish(self, facts: int) -> dict:
        results = []
        for mode in self.options["modes"]:
            in_process = self.timings.get(("in_process", mode), [])
            result = {"mode": mode, "latency_ms": _latency(in_process)}
            result["qps"] = 1000.0 * len(in_process) / sum(in_process) if in_process else None
            over_http = self.timings.get(("http", mode))
            if self.http_error is None and over_http:
                result["http_latency_ms"] = _latency(over_http)
                result["http_qps"] = 1000.0 * len(over_http) / sum(over_http)
            results.append(result)
        rss = peak_rss_mb()
        self.services.close()
        doc = {
            "backend": self.settings.longterm.backend,
            "record_s": self.record_s,
            "ingest_per_s": facts / self.record_s if self.record_s > 0 else None,
            "embedder_misses": self.embedder.misses,
            "first_query_ms": {
                "p50": metrics.percentile(self.first_ms, 50),
                "p95": metrics.percentile(self.first_ms, 95),
                "total_s": sum(self.first_ms) / 1000.0,
            },
            "results": results,
            # what a search cannot be faster than: its question embedded by the model alone
            "query_embedding_ms": _latency(self.embedder.query_ms)
            if self.embedder.query_ms
            else None,
            "peak_rss_mb": rss,
            "peak_pss_mb": self.peak_pss.mb,
            "database_mb": database_mb(self.settings),
            "workspace_mb": folder_mb(self.tmp),
        }
        if self.http_error:
            doc["http_error"] = self.http_error
        return doc


def _child(conn, settings: Settings, options: dict) -> None:
    """A backend's process: answers each command with ``("ok", value)`` or ``("error", text)``
    until ``finish``."""
    try:
        with ExitStack() as stack:
            backend = _Backend(settings, options, stack)
            conn.send(("ok", None))
            while True:
                command, *arguments = conn.recv()
                if command == "finish":
                    conn.send(("ok", backend.finish(*arguments)))
                    return
                conn.send(("ok", getattr(backend, command)(*arguments)))
    except BaseException:  # the driver reports it, naming the backend
        with suppress(OSError):  # the driver is gone: nobody to tell
            conn.send(("error", traceback.format_exc()))


# --- the driver ---------------------------------------------------------------------------------


class _Child:
    """The driver's handle on one backend's process."""

    def __init__(self, name: str, settings: Settings, options: dict) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, theirs = spawn.Pipe()
        self.process = spawn.Process(
            target=_child, args=(theirs, settings, options), name=f"scale-{name}", daemon=True
        )
        self.process.start()
        theirs.close()

    def send(self, *command) -> None:
        self.conn.send(command)

    def reply(self):
        try:
            status, value = self.conn.recv()
        except EOFError:
            raise MemoryServiceError(
                f"scale: the {self.name} process ended (exit {self.process.exitcode})"
            ) from None
        if status == "error":
            raise MemoryServiceError(f"scale: the {self.name} backend failed:\n{value}")
        return value

    def call(self, *command):
        self.send(*command)
        return self.reply()

    def stop(self) -> None:
        """Wait for the process to end; closing the pipe first ends one still waiting for a
        command (the driver failed), which then drops its schema and workspace."""
        self.conn.close()
        self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10)


def _in_turns(children: Sequence[_Child], turn: int, *command) -> list:
    """``command`` to every child, one after the other (each waits for the last: the host is
    shared), who goes first rotating with ``turn``; the replies in the children's order."""
    shift = turn % len(children)
    order = list(range(len(children)))[shift:] + list(range(len(children)))[:shift]
    replies: list = [None] * len(children)
    for i in order:
        replies[i] = children[i].call(*command)
    return replies


@contextmanager
def _children(settings: Settings, backends: Sequence[str], options: dict) -> Iterator[list]:
    children: list[_Child] = []
    try:
        for name in backends:
            children.append(_Child(name, with_backend(settings, name, None), options))
        for child in children:
            child.reply()  # up and built
        yield children
    finally:
        for child in children:
            child.stop()


def run_scale_turns(
    settings: Settings,
    backends: Sequence[str],
    *,
    facts: int,
    users: int,
    modes: Sequence[str],
    distinct_users: int | None = None,
    queries: int = 300,
    top_k: int = 10,
    batch_size: int = 100,
    http: bool = True,
    workdir: Path | None = None,
    seed: int = 7,
    show_progress: bool = True,
    with_source: bool = True,
    fill_writers: int = 0,
) -> dict:
    """Fill every backend in ``backends`` with ``facts`` facts over ``users`` users, taking
    turns user by user, and time the same questions on each, taking turns question by
    question. With ``fill_writers``, the users before the last ``distinct_users`` are
    recorded first by that many processes at once per backend (``scale_fill``), and the record
    rate is timed on the last ones. The first backend's figures are the document's own; each
    one's under ``backends``."""
    from memory_service.services.stores import build_embedder

    if facts < 1 or not 1 <= users <= facts:
        raise BenchInputError("--scale N needs N >= 1 and 1 <= --users <= N")
    distinct = users if distinct_users is None else distinct_users
    if not 1 <= distinct <= users:
        raise BenchInputError("--distinct-users must be between 1 and --users")
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_at_start = load_average()
    counts = _counts(facts, users)
    questions = {u: user_texts(u, counts[u], distinct, seed)[1] for u in range(users)}
    own_texts = [
        f.searchable_text
        for u in range(distinct)
        for f in scale_facts(user_texts(u, counts[u], distinct, seed)[0], with_source)
    ]
    model = build_embedder(settings)  # uncached: the model's own rate
    bank, embed_s = embed_distinct(model, own_texts, batch_size, show_progress)
    del model
    rng = random.Random(seed)
    pairs = [
        (user, rng.choice(questions[user]))
        for user in rng.choices(range(users), k=queries)
        if questions[user]
    ]
    options = {
        "modes": tuple(modes),
        "top_k": top_k,
        "batch_size": batch_size,
        "workdir": workdir,
        "seed": seed,
        "with_source": with_source,
        "distinct_users": distinct,
    }
    import numpy as np

    timed = range(users - distinct if fill_writers else 0, users)
    fills: list[dict | None] = [None] * len(backends)
    with _children(settings, backends, options) as children:
        if fill_writers:
            from memory_service.evaluation.scale_fill import fill

            bulk = [(u, counts[u]) for u in range(timed.start)]
            for i, child in enumerate(children):  # one backend at a time: the host is shared
                fills[i] = fill(
                    child.call("run_settings"),
                    bulk,
                    bank,
                    options,
                    writers=fill_writers,
                    show=show_progress,
                    label=child.name,
                )
        with Progress(
            len(timed), "scale: record, backends taking turns", enabled=show_progress
        ) as bar:
            for user in timed:
                texts, _ = user_texts(user, counts[user], distinct, seed)
                keys = [f.searchable_text for f in scale_facts(texts, with_source)]
                vectors = np.stack([bank[k] for k in keys])
                _in_turns(children, user, "record", user, counts[user], vectors)
                bar.update()
        asked = sorted({u for u, _ in pairs})
        with Progress(len(asked), "scale: first query per user", enabled=show_progress) as bar:
            for turn, user in enumerate(asked):
                _in_turns(children, turn, "warm", user)
                bar.update()
        if http:
            _in_turns(children, 0, "serve")
        with Progress(len(pairs), "scale: queries, taking turns", enabled=show_progress) as bar:
            for turn, (user, question) in enumerate(pairs):
                _in_turns(children, turn, "query", user, question, bool(turn % 2))
                bar.update()
        runs = _in_turns(children, 0, "finish", sum(counts[u] for u in timed))
    embedding = {
        "texts": len(bank),
        "seconds": embed_s,
        "per_s": len(bank) / embed_s if embed_s > 0 else None,
        "model": settings.embedding.model,
        "backend": settings.embedding.backend,
    }
    for run, filled in zip(runs, fills, strict=True):
        if filled is not None:
            run["fill"] = filled
        run["record_facts"] = sum(counts[u] for u in timed)
        rate, model_rate = run["ingest_per_s"], embedding["per_s"]
        # the record as a service does it, its own embedding included: the two times added
        run["with_embedding_per_s"] = (
            1.0 / (1.0 / rate + 1.0 / model_rate) if rate and model_rate else None
        )
    common = {
        "dataset": "scale",
        "facts": facts,
        "users": users,
        "distinct_users": distinct,
        "facts_per_user": facts / users,
        "source": with_source,
        "batch_size": batch_size,
        "queries": len(pairs),
        "top_k": top_k,
        "shared_facts": 0,
        "embedding": embedding,
        "load_average_start": load_at_start,
        "load_average_end": load_average(),
        "wall_s": time.perf_counter() - started,
    }
    return {**common, **runs[0], "backends": [{**common, **run} for run in runs]}
