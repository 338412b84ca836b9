"""``--scale N``: N facts over many users in one backend, then retrieve latency in-process and
over HTTP, record throughput and peak memory.

Facts come from the synthetic bank with dates to keep them distinct, each with a source text
(unless ``--no-source``): the message it came from, here its own text and the next fact's, as
a message often says more than one thing (the length the lexical leg then indexes); queries
are questions
about each user's slot facts, sampled with a fixed seed. The first query per user is timed on
its own (it builds that user's index); the latency figures after it are steady state, each
query asked in every mode in-process and over HTTP, interleaved. ``qps`` is serial: one caller,
1000 / mean latency. With ``--embedders onnx,torch`` the whole run repeats per embedder, each in
a fresh process, and a table sets their figures side by side.
"""

from __future__ import annotations

import logging
import multiprocessing
import random
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

from memory_service.config.settings import ObservabilitySettings, Settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import MemoryServiceError
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, Source, clip_source_text
from memory_service.evaluation import metrics
from memory_service.evaluation.backends import settings_for
from memory_service.evaluation.dataset import BenchInputError
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.evaluation.embedding import ColdQueryEmbedder, cold_embedder, with_embedder
from memory_service.evaluation.http_server import LoopbackServer, write_key_file
from memory_service.evaluation.machine import load_average
from memory_service.evaluation.memory_use import PeakPss, peak_rss_mb
from memory_service.evaluation.runner import TENANT, WARM_UP_QUERY
from memory_service.observe.progress import Progress

log = logging.getLogger("memory_service.evaluation")


BENCH_AGENT = "scale-agent"
# ``--scopes``: each query is also asked naming the tenant (no agent) and the agent and the
# tenant, beside the user's own scope alone (the path before scopes existed).
SCOPE_VARIANTS: dict[str, tuple[str, ...]] = {
    "": ("user",),
    "+tenant": ("user", "tenant"),
    "+agent+tenant": ("user", "agent", "tenant"),
}


def _user(index: int, agent: str | None = None) -> RuntimeContext:
    return RuntimeContext(TENANT, f"scale-user-{index:06d}", agent_id=agent)


def _record_shared(services, count: int, seed: int) -> None:
    """``count`` facts in the agent's and in the tenant's shared memory (the same bank)."""
    for offset, scope in enumerate(("agent", "tenant")):
        texts, _ = scale_texts(10_000_000 + offset, count, seed=seed)
        ctx = RuntimeContext(TENANT, "scale-curator", agent_id=BENCH_AGENT)
        for start in range(0, len(texts), 100):
            services.longterm.record(
                ctx, [Fact(t, scope=scope) for t in texts[start : start + 100]]
            )
    services.longterm.retrieve(ctx, WARM_UP_QUERY, 1, scopes=["agent", "tenant"])  # indexes


def _counts(facts: int, users: int) -> list[int]:
    base, extra = divmod(facts, users)
    return [base + (1 if i < extra else 0) for i in range(users)]


def _latency(values: Sequence[float]) -> dict:
    return {
        "p50": metrics.percentile(values, 50),
        "p95": metrics.percentile(values, 95),
        "mean": metrics.mean(values),
    }


def scale_facts(texts: Sequence[str], with_source: bool) -> list[Fact]:
    """The user's facts; with a source, each fact's message is its text and the next one's."""
    if not with_source:
        return [Fact(t) for t in texts]
    return [
        Fact(t, source=Source("scale", text=clip_source_text(f"{t} {texts[(i + 1) % len(texts)]}")))
        for i, t in enumerate(texts)
    ]


def _record(services, counts: list[int], batch_size: int, seed: int, show: bool, with_source: bool):
    questions: dict[int, list[str]] = {}
    record_s = 0.0
    with Progress(sum(counts), "scale: record", enabled=show) as bar:
        for user, count in enumerate(counts):
            texts, asked = scale_texts(user, count, seed=seed)
            questions[user] = asked
            ctx = _user(user)
            facts = scale_facts(texts, with_source)
            for start in range(0, len(facts), batch_size):
                batch = facts[start : start + batch_size]
                began = time.perf_counter()
                services.longterm.record(ctx, batch)
                record_s += time.perf_counter() - began
                bar.update(len(batch))
    return questions, record_s


def _first_queries(services, users: int, modes: Sequence[str], show: bool) -> list[float]:
    """Per user, the first retrieve in every mode: this builds the user's index."""
    first = []
    with Progress(users, "scale: first query per user", enabled=show) as bar:
        for user in range(users):
            t0 = time.perf_counter()
            for mode in modes:
                plain, _ = _mode_of(mode)
                services.longterm.retrieve(_user(user), WARM_UP_QUERY, 1, mode=plain)
            first.append(1000.0 * (time.perf_counter() - t0))
            bar.update()
    return first


# ``--modes ...,hybrid+filter``: hybrid with a filter every scale fact matches (kind and
# importance), so its figure is the filters' own cost over the same work as ``hybrid``
FILTERED = "hybrid+filter"
SCALE_FILTER = FactFilter(kinds=("fact",), min_importance=1)
HTTP_FILTER = {"kind": ["fact"], "min_importance": 1}


def _mode_of(name: str) -> tuple[str, FactFilter | None]:
    return ("hybrid", SCALE_FILTER) if name == FILTERED else (name, None)


def _search_over_http(client, user: int, query: str, name: str, top_k: int) -> None:
    mode, fact_filter = _mode_of(name)
    body = {"user_id": _user(user).user_id, "query": query, "top_k": top_k, "mode": mode}
    if fact_filter is not None:
        body["filter"] = HTTP_FILTER
    response = client.post("/v1/memories/search", json=body)
    if response.status_code != 200:
        raise MemoryServiceError(f"HTTP search failed: {response.status_code} {response.text}")


def _measure(
    services,
    clients: dict,
    pairs,
    modes,
    top_k: int,
    show: bool,
    scopes: bool = False,
) -> tuple[dict, str | None]:
    """Each query in every mode, in-process then over HTTP (each of ``clients``: ``http``,
    and ``http_plain`` with ``--observability-off-too``), interleaved: load from elsewhere on
    the machine then skews every mode and path alike instead of whichever ran last. With
    ``scopes``, the in-process query is asked once per ``SCOPE_VARIANTS`` entry (rows
    ``<mode>``: the user's scope alone, ``<mode>+tenant``, ``<mode>+agent+tenant``)."""
    timings: dict[tuple[str, str], list[float]] = {}
    http_error = None
    variants = SCOPE_VARIANTS if scopes else {"": None}  # None: the default scopes
    agent = BENCH_AGENT if scopes else None
    with Progress(len(pairs), "scale: queries", enabled=show) as bar:
        for turn, (user, query) in enumerate(pairs):
            for mode in modes:
                plain, fact_filter = _mode_of(mode)
                for suffix, named in variants.items():
                    t0 = time.perf_counter()
                    ctx = _user(user, agent)
                    services.longterm.retrieve(
                        ctx, query, top_k, mode=plain, scopes=named, filter=fact_filter
                    )
                    timings.setdefault(("in_process", mode + suffix), []).append(
                        1000.0 * (time.perf_counter() - t0)
                    )
                order = list(clients.items())
                if turn % 2:  # which app goes first alternates: no app always follows the
                    order.reverse()  # in-process call (measured: that one is slower)
                for path, client in order:
                    t0 = time.perf_counter()
                    try:
                        _search_over_http(client, user, query, mode, top_k)
                    except Exception as exc:  # keep the in-process figures of a long run
                        log.exception("scale: HTTP measurement failed; going on in-process only")
                        http_error, clients = f"{type(exc).__name__}: {exc}", {}
                        break
                    timings.setdefault((path, mode), []).append(1000.0 * (time.perf_counter() - t0))
            bar.update()
    results = []
    for mode in [m + suffix for m in modes for suffix in variants]:
        in_process = timings.get(("in_process", mode), [])
        result = {"mode": mode, "latency_ms": _latency(in_process)}
        result["qps"] = 1000.0 * len(in_process) / sum(in_process) if in_process else None
        for path in ("http", "http_plain"):
            if http_error is None and (over_http := timings.get((path, mode))):
                result[f"{path}_latency_ms"] = _latency(over_http)
                result[f"{path}_qps"] = 1000.0 * len(over_http) / sum(over_http)
        results.append(result)
    return results, http_error


def run_scale(
    settings: Settings,
    embedder: ColdQueryEmbedder,
    *,
    facts: int,
    users: int,
    modes: Sequence[str],
    queries: int = 300,
    top_k: int = 10,
    batch_size: int = 100,
    http: bool = True,
    observability_off_too: bool = False,
    workdir: Path | None = None,
    seed: int = 7,
    show_progress: bool = True,
    shared_facts: int = 0,
    with_source: bool = True,
) -> dict:
    """Fill one backend with ``facts`` facts over ``users`` users and measure it. With
    ``shared_facts``, that many facts go to an agent's and to the tenant's shared memory too,
    and every query is timed with and without the shared scopes (``SCOPE_VARIANTS``); with
    ``observability_off_too``, HTTP search also on an app without metrics or access log."""
    if facts < 1 or not 1 <= users <= facts:
        raise BenchInputError("--scale N needs N >= 1 and 1 <= --users <= N")
    from memory_service.services.container import build_services

    if http:  # fail now, not after an hour of ingest, if the app cannot be imported
        from memory_service.api.app import create_app  # noqa: F401

    started = time.perf_counter()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    with (
        PeakPss() as peak_pss,
        tempfile.TemporaryDirectory(prefix="memory-scale-", dir=workdir) as tmp,
    ):
        services = build_services(settings_for(settings, Path(tmp)), embedder=embedder)
        try:
            counts = _counts(facts, users)
            questions, record_s = _record(
                services, counts, batch_size, seed, show_progress, with_source
            )
            if shared_facts:
                _record_shared(services, shared_facts, seed)
            rss_after_ingest = peak_rss_mb()
            rng = random.Random(seed)
            pairs = [
                (user, rng.choice(questions[user]))
                for user in rng.choices(range(users), k=queries)
                if questions[user]
            ]
            embedder.mark_queries(query for _, query in pairs)
            first = _first_queries(services, users, modes, show_progress)
            with ExitStack() as stack:
                clients, http_error = {}, None
                if http:
                    try:
                        stack.enter_context(_access_log_to(Path(tmp) / "access.jsonl"))
                        clients["http"] = stack.enter_context(_http_client(services, Path(tmp)))
                        if observability_off_too:
                            off = ObservabilitySettings(metrics=False, access_log=False)
                            clients["http_plain"] = stack.enter_context(
                                _http_client(services, Path(tmp), observability=off)
                            )
                    except Exception as exc:  # keep the in-process figures of a long run
                        log.exception("scale: the HTTP server did not come up")
                        http_error = f"{type(exc).__name__}: {exc}"
                        clients = {}
                results, failed = _measure(
                    services, clients, pairs, modes, top_k, show_progress, bool(shared_facts)
                )
                http_error = http_error or failed
        finally:
            services.close()
    doc = {
        "dataset": "scale",
        "facts": facts,
        "users": users,
        "facts_per_user": facts / users,
        "source": with_source,
        "batch_size": batch_size,
        "queries": len(pairs),
        "top_k": top_k,
        "shared_facts": shared_facts,
        "record_s": record_s,
        "ingest_per_s": facts / record_s if record_s > 0 else None,
        "first_query_ms": {
            "p50": metrics.percentile(first, 50),
            "p95": metrics.percentile(first, 95),
            "total_s": sum(first) / 1000.0,
        },
        "results": results,
        "rss_after_ingest_mb": rss_after_ingest,
        "peak_rss_mb": peak_rss_mb(),
        "peak_pss_mb": peak_pss.mb,
        "wall_s": time.perf_counter() - started,
    }
    if http_error:
        doc["http_error"] = http_error
    return doc


@contextmanager
def _access_log_to(path: Path) -> Iterator[None]:
    """The access lines of the HTTP measurement, as JSON lines in ``path``: written and
    formatted as a served app writes them, without flooding the terminal."""
    from memory_service.observe.logs import JsonFormatter, TraceFilter

    access = logging.getLogger("memory_service.access")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.addFilter(TraceFilter())
    handler.setFormatter(JsonFormatter())
    saved = access.propagate, access.level
    access.addHandler(handler)
    access.propagate = False
    access.setLevel(logging.INFO)
    try:
        yield
    finally:
        access.removeHandler(handler)
        access.propagate, access.level = saved
        handler.close()


@contextmanager
def _http_client(services, tmp: Path, *, observability=None) -> Iterator:
    """An httpx client on the real app, served on loopback with a temporary API key file;
    ``observability`` replaces the settings' section (metrics, the access log)."""
    import httpx

    from memory_service.api.app import create_app
    from memory_service.api.keys import ApiKeyRing

    key_file = tmp / f"bench-api-keys-{secrets.token_hex(4)}.json"
    key = write_key_file(key_file, TENANT)
    app = create_app(services, ApiKeyRing.from_file(key_file), observability=observability)
    headers = {"Authorization": f"Bearer {key}"}
    with (
        LoopbackServer(app) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=60) as client,
    ):
        client.get("/healthz").raise_for_status()
        yield client


# --- ``--embedders``: the same scale run once per embedder, each in a fresh process -----------


def _scale_in_child(settings: Settings, choice: str, options: dict) -> dict:
    """One embedder's scale run, in a process of its own (peak RSS and imports are its own)."""
    if options.get("show_progress"):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    load_at_start = load_average()
    chosen = with_embedder(settings, choice)
    embedder = cold_embedder(chosen)
    doc = run_scale(chosen, embedder, **options)
    heavy = [m for m in ("torch", "sentence_transformers") if m in sys.modules]
    doc.update(
        embedder=choice,
        embedder_name=embedder.name,
        threads=chosen.embedding.threads,
        torch_imported=bool(heavy),
        load_average_start=load_at_start,
        load_average_end=load_average(),
    )
    return doc


def run_scale_per_embedder(settings: Settings, choices: Sequence[str], **options) -> dict:
    """``run_scale`` once per embedder in ``choices``, one after another, each in a fresh
    process: the figures sit side by side from one machine state, and one embedder's imports
    and memory never count against another. The first run is the document's own figures;
    every run is under ``embedders``."""
    spawn = multiprocessing.get_context("spawn")
    runs = []
    for choice in choices:
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            runs.append(pool.submit(_scale_in_child, settings, choice, options).result())
    return {**runs[0], "embedders": runs}
