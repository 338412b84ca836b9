"""The side-by-side table of ``bench --scale --embedders`` (one column per embedder) and of
``bench --scale --backends`` (one column per backend), printed on the terminal and written as
Markdown beside the JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

_ROWS: tuple[tuple[str, Callable[[dict], float | None], str], ...] = (
    ("record facts/s", lambda r: r.get("ingest_per_s"), "rate"),
    ("first query p50 ms", lambda r: r["first_query_ms"]["p50"], "ms"),
    ("peak RSS MB", lambda r: r.get("peak_rss_mb"), "mb"),
    ("peak PSS MB", lambda r: r.get("peak_pss_mb"), "mb"),
)


# ``--backends``: the record split in the backend's own work and the model's (see scale_turns)
_BACKEND_ROWS: tuple[tuple[str, Callable[[dict], float | None], str], ...] = (
    ("record facts/s, vectors given", lambda r: r.get("ingest_per_s"), "rate"),
    ("record facts/s, with embedding", lambda r: r.get("with_embedding_per_s"), "rate"),
    ("first query p50 ms", lambda r: r["first_query_ms"]["p50"], "ms"),
    ("query embedding p50 ms", lambda r: (r.get("query_embedding_ms") or {}).get("p50"), "ms"),
    ("peak RSS MB", lambda r: r.get("peak_rss_mb"), "mb"),
    ("peak PSS MB", lambda r: r.get("peak_pss_mb"), "mb"),
    ("on disk MB", lambda r: r.get("database_mb") or r.get("workspace_mb"), "mb"),
)


def _column(doc: dict) -> tuple[str, list[dict]]:
    """What a column is (``embedder`` or ``backend``) and the runs, one a column."""
    if "backends" in doc:
        return "backend", doc["backends"]
    return "embedder", doc["embedders"]


def _side_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    column, runs = _column(doc)
    header = ["", *(r[column] for r in runs)]
    if len(runs) == 2:
        header.append(f"{runs[1][column]}/{runs[0][column]}")
    stats = ("p50", "p95", "p99") if column == "backend" else ("p50", "p95")
    lines: list[tuple[str, list[float | None], str]] = []
    for i, result in enumerate(runs[0]["results"]):
        mode = result["mode"]
        for path, key in (("in-process", "latency_ms"), ("HTTP", "http_latency_ms")):
            for stat in stats:
                values = [(r["results"][i].get(key) or {}).get(stat) for r in runs]
                lines.append((f"{mode} {path} {stat} ms", values, "ms"))
    for label, pick, kind in _BACKEND_ROWS if column == "backend" else _ROWS:
        lines.append((label, [pick(r) for r in runs], kind))
    rows = []
    for label, values, kind in lines:
        cells = [label, *(_cell(v, kind) for v in values)]
        if len(runs) == 2:
            a, b = values
            cells.append(f"{b / a:.2f}x" if a and b is not None else "-")
        rows.append(cells)
    loads = [f"{_one_minute(r, 'start')} -> {_one_minute(r, 'end')}" for r in runs]
    rows.append(["load average (1 min)", *loads, *([""] if len(runs) == 2 else [])])
    return header, rows


def _one_minute(run: dict, when: str) -> str:
    load = run.get(f"load_average_{when}")
    return f"{load[0]:.2f}" if load else "?"


def _cell(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if kind in ("rate", "mb") else f"{value:.2f}"


def print_side_by_side(doc: dict, out: TextIO) -> None:
    """Every ``--embedders`` or ``--backends`` run as one column, the ratio of two beside them."""
    header, rows = _side_rows(doc)
    if "backends" in doc:
        print(f"\n{_backends_caption(doc)}", file=out)
    else:
        names = ", ".join(f"{r['embedder']} = {r['embedder_name']}" for r in doc["embedders"])
        print(f"\nembedders side by side ({names}; each in its own process)", file=out)
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    for row in [header, *rows]:
        cells = [
            row[0].ljust(widths[0]),
            *(v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)),
        ]
        print("  ".join(cells).rstrip(), file=out)


def _backends_caption(doc: dict) -> str:
    embedding = doc["embedding"]
    reuse = ""
    if doc["distinct_users"] < doc["users"]:
        reuse = (
            f"; users past the first {doc['distinct_users']:,} record the texts of user "
            f"(u mod {doc['distinct_users']:,}) under their own ids"
        )
    rate = embedding["per_s"]
    fill = doc.get("fill")
    if fill:
        reuse += (
            f"; the first {fill['users']:,} users were recorded by {fill['writers']} "
            f"processes at once ({fill['per_s']:,.0f} facts/s), the record rate is timed on "
            f"the last {doc['users'] - fill['users']:,} after them"
        )
    return (
        f"backends side by side, each in its own process, taking turns ({doc['facts']:,} facts "
        f"over {doc['users']:,} users{reuse}). Record times are the backend's own work: each "
        f"distinct text was embedded once before it ({embedding['texts']:,} texts, "
        f"{'-' if rate is None else f'{rate:,.0f}'} texts/s by the model alone); "
        f"'with embedding' adds that time back per fact."
    )


def side_by_side_markdown(doc: dict) -> str:
    header, rows = _side_rows(doc)
    lines = [f"{_backends_caption(doc)}\n"] if "backends" in doc else []
    lines += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
