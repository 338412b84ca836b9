"""The runner on a real files backend and the real model; `memory-service bench` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_service.bench.backends import FreshBackends
from memory_service.bench.datasets import load_dataset
from memory_service.bench.embedding import ColdQueryEmbedder
from memory_service.bench.runner import run
from memory_service.bench.summary import summarise
from memory_service.cli import main
from memory_service.config import Settings

FIXTURES = Path(__file__).parent / "fixtures"
MODES = ("bm25", "dense", "hybrid")


@pytest.fixture
def backends(tmp_path: Path, embedder) -> FreshBackends:
    return FreshBackends(Settings(), ColdQueryEmbedder(embedder), tmp_path / "work")


def test_merged_memories_carry_every_ref_and_gold_is_found_through_them(backends):
    dataset = load_dataset(
        "locomo", path=FIXTURES / "locomo_mini.json", unit="turns", turn_text="plain"
    )
    result = run(dataset, backends, modes=MODES, ks=(1, 3), show_progress=False)
    assert result.items_recorded == 12
    assert result.facts_stored == 11  # "See you tomorrow." twice is one fact
    asked = [o for o in result.outcomes if o.qid == "conv-test-1:q9"]
    assert {o.mode for o in asked} == set(MODES)
    for outcome in asked:  # the one fact carries both turns' ids, so gold D1:5 is found
        assert frozenset({"D1:4", "D1:5"}) in outcome.ranked
    assert list(backends.root.iterdir()) == []  # every temporary workspace is gone

    doc = summarise(result, (1, 3))
    assert doc["questions"] == 7 and doc["memories"] == 2
    assert doc["skipped"]["category 5 (adversarial, no answer)"] == 1
    assert [r["mode"] for r in doc["results"]] == list(MODES)
    hybrid = doc["results"][2]
    assert set(hybrid["categories"]) == {"1 multi-hop", "2 temporal", "4 single-hop"}
    assert 0.0 < hybrid["recall"]["3"] <= 1.0
    assert doc["legs"]["k"]["3"]["questions"] == 7


def test_gold_no_memory_carries_is_counted_unreachable(backends):
    dataset = load_dataset("locomo", path=FIXTURES / "locomo_mini.json", unit="facts")
    result = run(dataset, backends, modes=("bm25",), ks=(5,), show_progress=False)
    # D1:5 (said twice) has no observation: that one question's gold cannot be reached
    assert result.unreachable_gold == 1
    assert result.questions_with_unreachable_gold == 1
    assert "legs" not in summarise(result, (5,))


def test_bench_synthetic_end_to_end(tmp_path: Path):
    out, png = tmp_path / "results" / "synthetic.json", tmp_path / "plot.png"
    code = main(
        ["bench", "--users", "3", "--json", str(out), "--plot", str(png), "--no-progress"]
        + ["--workdir", str(tmp_path / "work")]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["dataset"] == "synthetic" and doc["unit"] == "facts"
    assert doc["backend"] == "files" and doc["memories"] == 3
    assert [r["mode"] for r in doc["results"]] == list(MODES)
    for result in doc["results"]:
        assert set(result["recall"]) == {"5", "10", "25"}
        assert set(result["recall_all"]) == {"5", "10", "25"}
        assert 0.0 <= result["mrr"] <= 1.0 and 0.0 <= result["ndcg@10"] <= 1.0
        assert result["latency_ms"]["p50"] > 0 and result["latency_ms"]["p95"] > 0
        assert result["ingest_per_s"] > 0
        assert result["stale"]["rate"] == 0.0  # a superseded fact never comes back
    hybrid = doc["results"][2]["recall"]
    assert hybrid["5"] >= 0.6 and hybrid["10"] >= 0.8 and hybrid["25"] >= 0.95
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_locomo_facts_end_to_end(tmp_path: Path, capsys):
    out = tmp_path / "locomo.json"
    path = FIXTURES / "locomo_mini.json"
    args = ["bench", "--dataset", "locomo", "--path", str(path), "--unit", "facts"]
    assert main([*args, "--k", "1,3", "--modes", "dense,hybrid", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["unit"] == "facts" and doc["k"] == [1, 3]
    assert [r["mode"] for r in doc["results"]] == ["dense", "hybrid"]
    assert doc["skipped"]["no evidence id resolves to a turn"] == 1
    assert doc["notes"]["observations linked to no turn"] == 1
    printed = capsys.readouterr().out
    assert "per category" in printed and "4 single-hop" in printed


def test_bench_scale_measures_in_process_and_over_http(tmp_path: Path):
    out = tmp_path / "scale.json"
    args = ["bench", "--scale", "40", "--users", "4", "--queries", "6", "--batch-size", "7"]
    assert main([*args, "--json", str(out), "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    assert doc["dataset"] == "scale" and doc["facts"] == 40 and doc["users"] == 4
    assert doc["ingest_per_s"] > 0 and doc["peak_rss_mb"] > 0
    for result in doc["results"]:
        assert result["latency_ms"]["p95"] >= result["latency_ms"]["p50"] > 0
        assert result["http_latency_ms"]["p95"] >= result["http_latency_ms"]["p50"] > 0


def test_bench_refuses_public_data_without_a_path(capsys):
    assert main(["bench", "--dataset", "locomo"]) == 2
    assert "--path" in capsys.readouterr().err
