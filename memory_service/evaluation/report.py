"""Print a result document as tables, write it as JSON, plot it as a PNG.

Tables show rates as percentages with one decimal (the JSON keeps fractions). A recall run
with hybrid and a leg ends with its targets (``memory_service.evaluation.targets``), one line each.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from memory_service.evaluation.dataset import BenchInputError
from memory_service.evaluation.targets import tally


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}"


def _recall_mrr(scores: dict, ks: list[str]) -> str:
    """One category's cell: recall at each k, then MRR ("94.1/97.0/98.5, 88.2")."""
    return "/".join(_pct(scores["recall"][k]) for k in ks) + ", " + _pct(scores["mrr"])


def _pss(doc: dict) -> str:
    """``(PSS n MB)`` beside the peak RSS: each physical page once (``bench.memory_use``)."""
    pss = doc.get("peak_pss_mb")
    return "" if pss is None else f" (PSS {pss:,.0f} MB)"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, *, text_columns: int = 1
) -> None:
    """Columns padded to fit; the first ``text_columns`` flush left, numbers flush right."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def cells(row: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i < text_columns else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    print(cells(header), file=out)
    print("-" * (sum(widths) + 2 * (len(widths) - 1)), file=out)
    for row in rows:
        print(cells(row), file=out)


def _counts(title: str, counts: dict, out: TextIO) -> None:
    if counts:
        shown = "; ".join(f"{reason}: {n}" for reason, n in counts.items())
        print(f"{title}: {shown}", file=out)


def print_recall(doc: dict, out: TextIO) -> None:
    """The main table, the per-category table, the legs table, skips and notes."""
    ks = [str(k) for k in doc["k"]]
    print(
        f"\n{doc['dataset']} | unit {doc['unit']} | backend {doc.get('backend', '?')} "
        f"(preset {doc.get('preset', '?')}) | {doc['memories']} memories, "
        f"{doc['items_recorded']} items -> {doc['facts_stored']} facts | "
        f"{doc['questions']} questions",
        file=out,
    )
    header = ["mode", *(f"R@{k}" for k in ks), *(f"Rall@{k}" for k in ks), "MRR", "nDCG@10"]
    embedding = (doc.get("query_embedding_ms") or {}).get("p50")
    header += ["p50 ms", "p95 ms", "÷ embed", "ingest/s"]
    rows = []
    for r in doc["results"]:
        p50 = r["latency_ms"]["p50"]
        rows.append(
            [
                r["mode"],
                *(_pct(r["recall"][k]) for k in ks),
                *(_pct(r["recall_all"][k]) for k in ks),
                _pct(r["mrr"]),
                _pct(r["ndcg@10"]),
                _ms(p50),
                _ms(r["latency_ms"]["p95"]),
                f"{p50 / embedding:.2f}x" if embedding and p50 is not None else "-",
                _rate(r["ingest_per_s"]),
            ]
        )
    _table(header, rows, out)
    if embedding:
        print(
            f"query embedding alone (the model, this run): p50 {_ms(embedding)} ms, p95 "
            f"{_ms(doc['query_embedding_ms']['p95'])} ms; '÷ embed': a mode's p50 over it",
            file=out,
        )
    stale = [(r["mode"], r["stale"]) for r in doc["results"] if "stale" in r]
    if stale:
        depth = stale[0][1]["at_k"]
        shown = ", ".join(f"{mode} {_pct(s['rate'])}%" for mode, s in stale)
        print(
            f"outdated (superseded) fact retrieved in the top {depth}, share of "
            f"{stale[0][1]['questions']} update questions: {shown}",
            file=out,
        )
    if any("categories" in r for r in doc["results"]):
        print(f"\nper category: recall@{'/'.join(ks)}, MRR (%)", file=out)
        header = ["category", "n", *(r["mode"] for r in doc["results"])]
        rows = []
        for category in doc["categories"]:
            cells = [r["categories"][category] for r in doc["results"]]
            rows.append(
                [
                    category,
                    str(cells[0]["questions"]),
                    *(_recall_mrr(c, ks) for c in cells),
                ]
            )
        _table(header, rows, out)
    if "legs" in doc:
        print("\nlegs compared per question (recall@k): counts of questions", file=out)
        header = ["k", "bm25>dense", "dense>bm25", "tie", "neither", "oracle R"]
        has_hybrid = "hybrid_below_best_leg" in next(iter(doc["legs"]["k"].values()))
        if has_hybrid:
            header += ["hybrid<best", "hybrid>best"]
        rows = []
        for k, c in doc["legs"]["k"].items():
            row = [k, c["bm25_better"], c["dense_better"], c["tie"], c["neither_leg_hits"]]
            row.append(_pct(c["best_leg_oracle"]))
            if has_hybrid:
                row += [c["hybrid_below_best_leg"], c["hybrid_above_best_leg"]]
            rows.append([str(x) for x in row])
        _table(header, rows, out)
    print_injection(doc, out)
    ingest = doc["ingest"]
    print(
        f"\ningest: {ingest['items']} items in {ingest['record_s']:.1f} s "
        f"({_rate(ingest['per_s'])}/s, embedding included); index build per memory "
        f"p50 {_ms(ingest['index_build_ms']['p50'])} ms; wall {doc['wall_s']:.1f} s",
        file=out,
    )
    _counts("skipped questions", doc["skipped"], out)
    _counts("notes", doc["notes"], out)
    if (ceiling := doc.get("recall_ceiling")) is not None and ceiling < 1.0:
        print(
            f"recall ceiling: a perfect ranking reaches {_pct(ceiling)}% once k covers every "
            "gold id some memory carries",
            file=out,
        )
    print_targets(doc, out)


INJECTION_HEADER = ["threshold", "own R@{k}", "false injection", "injected/question"]


def injection_title(sweep: dict) -> str:
    return (
        f"threshold sweep (hybrid, top {sweep['top_k']}): recall@{sweep['top_k']} of "
        f"{sweep['own_questions']} questions on their own memory; false injection: share of "
        f"{sweep['foreign_questions']} questions asked of another memory that still recall "
        f">= 1 memory"
    )


def injection_header(sweep: dict) -> list[str]:
    """The sweep's columns; with probes, the share of own questions answered and each probe
    category's false injections beside them."""
    header = [h.format(k=sweep["top_k"]) for h in INJECTION_HEADER]
    if probes := sweep.get("probes"):
        header += ["answered"] + [f"false inj. {c}" for c in probes]
    return header


def injection_rows(doc: dict) -> list[list[str]]:
    sweep = doc["injection"]
    default = sweep.get("default")
    rows = []
    for r in sweep["rows"]:
        row = [
            f"{r['threshold']:g}" + (" (default)" if r["threshold"] == default else ""),
            _pct(r["recall"]),
            _pct(r["false_injection"]),
            "-" if r["injected_per_question"] is None else f"{r['injected_per_question']:.2f}",
        ]
        if probes := sweep.get("probes"):
            row.append(_pct(r.get("answered")))
            by_probe = r.get("false_injection_by_probe", {})
            row += [_pct(by_probe.get(c)) for c in probes]
        rows.append(row)
    return rows


def print_injection(doc: dict, out: TextIO) -> None:
    """The threshold sweep, when the run made one."""
    if "injection" not in doc:
        return
    sweep = doc["injection"]
    print(f"\n{injection_title(sweep)}", file=out)
    _table(injection_header(sweep), injection_rows(doc), out)


TARGETS_TITLE = "targets (hybrid against the single legs and plain hybrid, in this run)"


def print_targets(doc: dict, out: TextIO) -> None:
    """One line per target: what it is, the numbers, the verdict; then how many were met."""
    verdicts = doc.get("targets")
    if not verdicts:
        return
    print(f"\n{TARGETS_TITLE}", file=out)
    rows = [[v["description"], v["shown"], v["status"]] for v in verdicts]
    _table(["target", "measured", "verdict"], rows, out, text_columns=3)
    print(tally(verdicts), file=out)


def print_scale(doc: dict, out: TextIO) -> None:
    print(
        f"\nscale | backend {doc.get('backend', '?')} | {doc['facts']:,} facts over "
        f"{doc['users']:,} users | {doc['queries']} queries per mode and path",
        file=out,
    )
    header = ["mode", "in-process p50", "p95", "p99", "HTTP p50", "p95", "serial qps", "HTTP qps"]
    rows = []
    for r in doc["results"]:
        http = r.get("http_latency_ms") or {}
        rows.append(
            [
                r["mode"],
                _ms(r["latency_ms"]["p50"]),
                _ms(r["latency_ms"]["p95"]),
                _ms(r["latency_ms"].get("p99")),
                _ms(http.get("p50")),
                _ms(http.get("p95")),
                _rate(r.get("qps")),
                _rate(r.get("http_qps")),
            ]
        )
    _table(header, rows, out)
    _print_observability(doc, out)
    first = doc["first_query_ms"]
    print(
        f"record: {doc.get('record_facts', doc['facts']):,} facts in {doc['record_s']:.1f} s "
        f"({_rate(doc['ingest_per_s'])}"
        f" facts/s, batches of {doc['batch_size']}); first query per user (index build) p50 "
        f"{_ms(first['p50'])} ms, p95 {_ms(first['p95'])} ms; peak RSS "
        f"{doc['peak_rss_mb']:,.0f} MB{_pss(doc)}; wall {doc['wall_s']:.0f} s",
        file=out,
    )
    if doc.get("fill"):
        fill = doc["fill"]
        print(
            f"before it, the fill: {fill['facts']:,} facts of {fill['users']:,} users by "
            f"{fill['writers']} processes at once in {fill['seconds']:.0f} s "
            f"({_rate(fill['per_s'])} facts/s)",
            file=out,
        )
    if doc.get("database_mb") is not None:
        print(
            f"database size on disk (tables, indexes, TOAST): {doc['database_mb']:,.1f} MB",
            file=out,
        )
    if doc.get("http_error"):
        print(f"HTTP measurement failed: {doc['http_error']}", file=out)


def observability_rows(doc: dict) -> list[list[str]]:
    """Per mode, HTTP search with metrics and the access log (the default app) and without
    (``--observability-off-too``), measured interleaved, and the difference of the p50s."""
    rows = []
    for r in doc["results"]:
        on, off = r.get("http_latency_ms"), r.get("http_plain_latency_ms")
        if not on or not off:
            continue
        overhead = 100.0 * (on["p50"] / off["p50"] - 1.0) if off["p50"] else None
        rows.append(
            [
                r["mode"],
                _ms(on["p50"]),
                _ms(on["p95"]),
                _ms(off["p50"]),
                _ms(off["p95"]),
                "-" if overhead is None else f"{overhead:+.1f}%",
            ]
        )
    return rows


OBSERVABILITY_HEADER = ["mode", "on p50", "on p95", "off p50", "off p95", "p50 overhead"]


def _print_observability(doc: dict, out: TextIO) -> None:
    rows = observability_rows(doc)
    if rows:
        print("HTTP search, observability on (metrics + JSON access log) vs off:", file=out)
        _table(OBSERVABILITY_HEADER, rows, out)


def print_report(doc: dict, out: TextIO) -> None:
    if doc["dataset"] == "scale":
        print_scale(doc, out)
    else:
        print_recall(doc, out)


def write_json(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_plot(doc: dict, path: Path) -> None:
    """Recall@k per mode and latency per mode (recall runs); latency per path (scale runs)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BenchInputError(
            "--plot needs matplotlib: pip install 'memory-service[plot]'"
        ) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    modes = [r["mode"] for r in doc["results"]]
    if doc["dataset"] == "scale":
        fig, axis = plt.subplots(figsize=(7, 4))
        series = {
            "in-process p50": [r["latency_ms"]["p50"] for r in doc["results"]],
            "in-process p95": [r["latency_ms"]["p95"] for r in doc["results"]],
            "HTTP p50": [(r.get("http_latency_ms") or {}).get("p50") for r in doc["results"]],
            "HTTP p95": [(r.get("http_latency_ms") or {}).get("p95") for r in doc["results"]],
        }
        _bars(axis, modes, series, "retrieve latency (ms)")
        axis.set_title(f"{doc['facts']:,} facts / {doc['users']:,} users ({doc['backend']})")
    else:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        ks = doc["k"]
        for r in doc["results"]:
            left.plot(ks, [100 * r["recall"][str(k)] for k in ks], marker="o", label=r["mode"])
        left.set_xlabel("k")
        left.set_ylabel("recall@k (%)")
        left.set_xticks(ks)
        left.grid(alpha=0.3)
        left.legend()
        left.set_title(f"{doc['dataset']} ({doc['unit']}): recall@k")
        series = {
            "p50": [r["latency_ms"]["p50"] for r in doc["results"]],
            "p95": [r["latency_ms"]["p95"] for r in doc["results"]],
        }
        _bars(right, modes, series, "query latency (ms)")
        right.set_title(f"retrieve latency ({doc.get('backend', '?')})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _bars(axis, modes: list[str], series: dict[str, list], ylabel: str) -> None:
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [m + i * width for m in range(len(modes))]
        axis.bar(xs, [v or 0.0 for v in values], width, label=label)
    axis.set_xticks([m + width * (len(series) - 1) / 2 for m in range(len(modes))], modes)
    axis.set_ylabel(ylabel)
    axis.grid(axis="y", alpha=0.3)
    axis.legend()


def to_markdown(doc: dict) -> str:
    """The recall tables as Markdown (for ``benchmarks/RESULTS.md``)."""
    if doc["dataset"] == "scale":
        lines = [
            "| mode | in-process p50 ms | p95 ms | HTTP p50 ms | p95 ms | serial qps | HTTP qps |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in doc["results"]:
            http = r.get("http_latency_ms") or {}
            lines.append(
                f"| {r['mode']} | {_ms(r['latency_ms']['p50'])} | {_ms(r['latency_ms']['p95'])}"
                f" | {_ms(http.get('p50'))} | {_ms(http.get('p95'))} | {_rate(r.get('qps'))}"
                f" | {_rate(r.get('http_qps'))} |"
            )
        if rows := observability_rows(doc):
            head = "| " + " | ".join(OBSERVABILITY_HEADER) + " |"
            lines += ["", head, "|---" * len(OBSERVABILITY_HEADER) + "|"]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    ks = [str(k) for k in doc["k"]]
    head = [*(f"R@{k}" for k in ks), *(f"Rall@{k}" for k in ks), "MRR", "nDCG@10"]
    head += ["p50 ms", "p95 ms", "ingest/s"]
    lines = ["| mode | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for r in doc["results"]:
        cells = [_pct(r["recall"][k]) for k in ks] + [_pct(r["recall_all"][k]) for k in ks]
        cells += [_pct(r["mrr"]), _pct(r["ndcg@10"]), _ms(r["latency_ms"]["p50"])]
        cells += [_ms(r["latency_ms"]["p95"]), _rate(r["ingest_per_s"])]
        lines.append(f"| {r['mode']} | " + " | ".join(cells) + " |")
    if any("categories" in r for r in doc["results"]):
        modes = [r["mode"] for r in doc["results"]]
        lines += ["", f"Per category, recall@{'/'.join(ks)}, MRR (%):", ""]
        lines += ["| category | n | " + " | ".join(modes) + " |", "|---" * (len(modes) + 2) + "|"]
        for category in doc["categories"]:
            cells = [r["categories"][category] for r in doc["results"]]
            shown = [_recall_mrr(c, ks) for c in cells]
            lines.append(f"| {category} | {cells[0]['questions']} | " + " | ".join(shown) + " |")
    if "legs" in doc:
        first = next(iter(doc["legs"]["k"].values()))
        extra = ["hybrid<best", "hybrid>best"] if "hybrid_below_best_leg" in first else []
        head = ["k", "bm25>dense", "dense>bm25", "tie", "neither", "best-leg oracle R", *extra]
        lines += ["", "Legs per question (counts of questions; oracle = better leg each time):", ""]
        lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for k, c in doc["legs"]["k"].items():
            row = [k, c["bm25_better"], c["dense_better"], c["tie"], c["neither_leg_hits"]]
            row.append(_pct(c["best_leg_oracle"]))
            if extra:
                row += [c["hybrid_below_best_leg"], c["hybrid_above_best_leg"]]
            lines.append("| " + " | ".join(str(x) for x in row) + " |")
    if "injection" in doc:
        sweep = doc["injection"]
        header = injection_header(sweep)
        title = injection_title(sweep)
        lines += ["", f"{title[0].upper()}{title[1:]}:", ""]
        lines += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in injection_rows(doc)]
    if doc.get("targets"):
        lines += ["", f"{TARGETS_TITLE[0].upper()}{TARGETS_TITLE[1:]}:", ""]
        lines += ["| target | measured | verdict |", "|---|---|---|"]
        for v in doc["targets"]:
            lines.append(f"| {v['description']} | {v['shown']} | {v['status']} |")
        lines += ["", f"{tally(doc['targets']).capitalize()}."]
    return "\n".join(lines) + "\n"
