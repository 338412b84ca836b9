"""Every lab module and the cheapest measurement scripts, run on a tiny input made here: two
made-up LoCoMo-shaped conversations and a one-user synthetic set, vectors from the session's
embedder cached in a temporary folder. Each test checks what a user of the lab reads: the table
with its rows, or the results file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.lab import (
    fusion_frontier,
    fusion_grid,
    fusion_latency,
    lexical_coverage,
    maxsim_cuts,
    near_duplicates,
    presets,
    score_normalisation,
    scripts_lexical,
    second_hop,
    session_archive,
    stemming,
    variants,
)

ROW = re.compile(r"\d\.\d{3} / \d\.\d{3} / \d\.\d{3}  MRR \d\.\d{3}")

_TALK = {
    "conv-a": (
        ("Ana", "Ben"),
        [
            [
                "I adopted a grey cat called Pixel last week.",
                "Lovely! I started training for a marathon in Lisbon.",
                "Pixel sleeps on my keyboard while I paint.",
                "My running shoes are already worn out.",
            ],
            [
                "I sold two paintings at the harbour market.",
                "I finished the marathon in four hours.",
                "Pixel knocked my paint water over again.",
                "Next I want to hike the coast path.",
            ],
        ],
    ),
    "conv-b": (
        ("Cleo", "Dan"),
        [
            [
                "My sister moved to Oslo for a job in robotics.",
                "I bake sourdough bread every Sunday morning.",
                "She says the winters there are very dark.",
                "My starter is named Bubbles.",
            ],
            [
                "I visited my sister in Oslo in March.",
                "Bubbles survived a week in the fridge.",
                "We went skiing near the fjord.",
                "I gave a loaf to every neighbour on the street.",
            ],
        ],
    ),
}
_QUESTIONS = {
    "conv-a": [
        ("What is the name of Ana's cat?", "Pixel", "D1:1", 4),
        ("Where did Ben run a marathon?", "Lisbon", "D1:2; D2:2", 1),
        ("When did Ana sell paintings?", "at the market", "D2:1", 2),
        ("What would Ben like to do next?", "hike", "D2:4", 3),
    ],
    "conv-b": [
        ("Where does Cleo's sister work?", "Oslo", "D1:1", 4),
        ("What is Dan's sourdough starter called?", "Bubbles", "D1:4", 4),
        ("What did Cleo do in Oslo?", "skiing", "D2:1; D2:3", 1),
        ("What does Dan bake?", "bread", "D1:2", 3),
    ],
}


def _sample(sample_id: str) -> dict:
    (a, b), sessions = _TALK[sample_id]
    conversation: dict = {"speaker_a": a, "speaker_b": b}
    observation: dict = {}
    for n, texts in enumerate(sessions, start=1):
        conversation[f"session_{n}_date_time"] = f"1:0{n} pm on {n + 3} May, 2023"
        turns = [
            {"speaker": (a, b)[i % 2], "dia_id": f"D{n}:{i + 1}", "text": text}
            for i, text in enumerate(texts)
        ]
        conversation[f"session_{n}"] = turns
        observation[f"session_{n}_observation"] = {
            speaker: [
                [f"{t['speaker']} said: {t['text']}", t["dia_id"]]
                for t in turns
                if t["speaker"] == speaker
            ]
            for speaker in (a, b)
        }
    qa = [
        {"question": q, "answer": ans, "evidence": [ev], "category": cat}
        for q, ans, ev, cat in _QUESTIONS[sample_id]
    ]
    return {
        "sample_id": sample_id,
        "conversation": conversation,
        "qa": qa,
        "observation": observation,
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> list[str]:
    """The arguments every lab module takes, pointing at the tiny inputs."""
    root = tmp_path_factory.mktemp("lab")
    data = root / "locomo-tiny.json"
    data.write_text(json.dumps([_sample(s) for s in _TALK]))
    return ["--data", str(data), "--cache", str(root / "cache"), "--synthetic-users", "1"]


def test_presets_prints_each_mode_on_each_set(lab, embedder, capsys) -> None:
    sets = "synthetic,locomo-turns,locomo-facts"
    assert presets.main([*lab, "--sets", sets], embedder=embedder) == 0
    out = capsys.readouterr().out
    for name in sets.split(","):
        assert f"{name}: R@5 / R@10 / R@25  MRR" in out
    rows = [line for line in out.splitlines() if ROW.search(line)]
    assert len(rows) == 9  # 3 sets x (bm25, dense, hybrid)
    assert all(line.split()[0] == "hybrid" for line in rows)


def test_presets_ceiling_is_perfect_when_every_gold_id_is_held(lab, embedder, capsys) -> None:
    assert presets.main([*lab, "--sets", "locomo-turns", "--ceiling"], embedder=embedder) == 0
    assert "locomo-turns: perfect ranking R@5 / R@10 / R@25: 1.000 / 1.000 / 1.000" in (
        capsys.readouterr().out
    )


def test_fusion_grid_reports_held_out_recall_per_conversation(lab, embedder, capsys) -> None:
    assert fusion_grid.main(lab, embedder=embedder) == 0
    out = capsys.readouterr().out
    assert "  conv-a: z wd=" in out and "  conv-b: z wd=" in out
    assert re.search(r"turns: held-out recall \d\.\d{3} / \d\.\d{3} / \d\.\d{3}", out)
    assert re.search(r"facts: held-out recall \d\.\d{3} / \d\.\d{3} / \d\.\d{3}", out)


def test_fusion_frontier_writes_every_grid_point(lab, embedder, tmp_path) -> None:
    out = tmp_path / "frontier.json"
    assert fusion_frontier.main([*lab, "--json", str(out)], embedder=embedder) == 0
    points = json.loads(out.read_text())["grid"]
    sizes = len(fusion_frontier.WEIGHTS) * len(fusion_frontier.MIN_SPREADS)
    assert len(points) == sizes * len(fusion_frontier.COVERAGES)
    assert set(points[0]["targets"]) == {
        "synthetic >= dense at R@5, R@10, MRR",
        "turns no loss",
        "facts >= best leg + 3",
    }
    assert all(len(p["locomo-facts"]) == 4 for p in points)  # R@5, R@10, R@25, MRR


def test_stemming_compares_stemmers_and_restores_snowball(lab, embedder, tmp_path) -> None:
    import indexing.tokenize as tokenize_module

    snowball = tokenize_module.stem
    out = tmp_path / "stemmers.json"
    args = [*lab, "--stemmers", "light,snowball", "--json", str(out)]
    assert stemming.main(args, embedder=embedder) == 0
    result = json.loads(out.read_text())
    assert set(result) == {"light", "snowball"}
    for stem in result.values():
        assert set(stem["rows"]) == {"synthetic", "locomo-turns", "locomo-facts"}
        assert set(stem["rows"]["locomo-turns"]) == {"bm25", "dense", "hybrid"}
        assert set(stem["hybrid_r10_per_conversation"]["locomo-turns"]) == {"conv-a", "conv-b"}
        assert len(stem["targets"]) == 3
    assert tokenize_module.stem is snowball
    assert stemming.light_stem("running") == "run"


def test_scripts_lexical_scores_every_scheme_and_restores_the_tokenizer(tmp_path, capsys):
    import indexing.tokenize as tokenize_module

    def sentence(words: list[tuple[str, str]]) -> dict:
        return {
            "chinese": "".join(w for w, _ in words),
            "pinyin": " ".join(p for _, p in words),
            "tokens": [{"word": w, "pinyin": p} for w, p in words],
        }

    hsk = tmp_path / "sentences.json"
    rows = [
        [("我", "wǒ"), ("喜欢", "xǐ huan"), ("喝", "hē"), ("茶", "chá")],
        [("我", "wǒ"), ("家", "jiā"), ("有", "yǒu"), ("猫", "māo")],
        [("北京", "běi jīng"), ("烤鸭", "kǎo yā"), ("好吃", "hǎo chī")],
    ]
    hsk.write_text(json.dumps([sentence(r) for r in rows], ensure_ascii=False))
    out = tmp_path / "scripts.json"
    grams = tokenize_module.cjk_grams
    scripts_lexical.main(["--hsk", str(hsk), "--json", str(out)])
    assert tokenize_module.cjk_grams is grams
    result = json.loads(out.read_text())
    assert set(result["cjk"]) == set(scripts_lexical.CJK_SCHEMES)
    assert set(result["accents"]) == set(scripts_lexical.ACCENT_SCHEMES)
    # a one-character word alone: only schemes with unigrams find it
    assert result["cjk"]["bigrams"]["1 char"]["found"] < result["cjk"]["uni+bi"]["1 char"]["found"]
    assert result["accents"]["none"]["typed bare"]["found"] < 100.0
    assert result["accents"]["fold+original"]["typed bare"]["found"] == 100.0
    assert "| uni+bi |" in capsys.readouterr().out


def test_lexical_coverage_table_and_diagnosis(lab, embedder, capsys) -> None:
    assert lexical_coverage.main(lab, embedder=embedder) == 0
    out = capsys.readouterr().out
    for label in ("hybrid, no coverage", "hybrid, coverage^0.5", "hybrid, coverage^1", "rrf"):
        assert len([line for line in out.splitlines() if line.startswith(f"  {label} ")]) >= 3
    assert lexical_coverage.main([*lab, "--diagnose"], embedder=embedder) == 0
    assert re.search(
        r"^\d+ questions where hybrid ranks the answer below dense$", capsys.readouterr().out, re.M
    )


def test_score_normalisation_prints_every_variant_and_restores_fusion(
    lab, embedder, capsys
) -> None:
    import memory_service.longterm.fusion as fusion

    original = fusion.standardise_leg
    assert score_normalisation.main([*lab, "--sets", "synthetic"], embedder=embedder) == 0
    out = capsys.readouterr().out
    labels = [label for label, _, _ in score_normalisation.variants()]
    assert [line[4:] for line in out.splitlines() if line.startswith("=== ")] == labels
    assert fusion.standardise_leg is original


def test_variants_prints_one_row_per_variant(lab, torch_embedder, capsys) -> None:
    # the late-interaction variants read token vectors from the sentence-transformers model
    assert variants.main([*lab, "--unit", "facts"], embedder=torch_embedder) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if ROW.search(line)]
    names = [line[2:46].strip() for line in rows]
    assert len(rows) == 6 + len(variants.configs()) + 13 + 4
    assert "hybrid = zscore + dates + neighbours" in names
    assert "bm25 + MaxSim in place of dense" in names
    assert "facts + source message keys (both)" in names


def test_maxsim_cuts_reports_bytes_and_recall_per_cut(lab, torch_embedder, capsys) -> None:
    args = [*lab, "--unit", "turns", "--only", "int8"]
    assert maxsim_cuts.main(args, embedder=torch_embedder) == 0  # token vectors: torch's model
    out = capsys.readouterr().out
    chosen = [c for c in maxsim_cuts.cuts() if "int8" in c.name]
    lines = [line for line in out.splitlines() if re.search(r" \d+ B \(", line)]
    assert len(lines) == len(chosen)
    assert all(len(ROW.findall(line)) == 2 for line in lines)
    assert "today's default hybrid:" in out


def test_second_hop_scores_every_candidate_per_category(lab, embedder, tmp_path, capsys):
    out_file = tmp_path / "second-hop.json"
    args = [*lab, "--sets", "locomo-turns,locomo-facts,synthetic", "--json", str(out_file)]
    assert second_hop.main(args, embedder=embedder) == 0
    out = capsys.readouterr().out
    labels = [label for label, _ in second_hop.candidates({})]
    result = json.loads(out_file.read_text())
    assert list(result) == ["locomo-turns", "locomo-facts", "synthetic"]
    for name, rows in result.items():
        assert f"{name}: R@5 / R@10 / R@25  MRR  | R@10 by category:" in out
        assert list(rows) == labels
        for row in rows.values():
            assert all(0.0 <= v <= 1.0 for v in row["recall"].values())
    categories = set(result["locomo-turns"]["hybrid (today's default)"]["r10_by_category"])
    assert categories == {"1 multi-hop", "2 temporal", "3 open-domain", "4 single-hop"}
    # a hop reorders the first hop's memories; on two short talks it finds every gold turn
    assert result["locomo-turns"]["dense hop m=3 w=0.3"]["recall"]["25"] == 1.0


def test_second_hop_held_out_chooses_a_setting_per_fold(lab, embedder, tmp_path, capsys):
    out_file = tmp_path / "held-out.json"
    args = [*lab, "--sets", "locomo-turns", "--held-out", "--json", str(out_file)]
    assert second_hop.main(args, embedder=embedder) == 0
    assert "locomo-turns: leave one conversation out, R@10" in capsys.readouterr().out
    result = json.loads(out_file.read_text())["locomo-turns"]
    assert list(result) == list(second_hop.families({}))
    for family, row in result.items():
        settings = [label for label, _ in second_hop.families({})[family]]
        assert len(row["chosen"]) == 2  # one fold per conversation
        assert set(row["chosen"]) <= set(settings)
        assert 0.0 <= row["held_out_r10"] <= 1.0
    assert (
        second_hop.main(
            [*lab, "--sets", "locomo-turns", "--misses", "--json", str(out_file)], embedder=embedder
        )
        == 0
    )
    shares = json.loads(out_file.read_text())["locomo-turns"]
    assert all(abs(sum(row.values()) - 1.0) < 1e-9 for row in shares.values())


def test_fusion_latency_times_both_presets(lab, embedder, capsys) -> None:
    assert fusion_latency.main([*lab[:2], "--backend", "files"], embedder=embedder) == 0
    out = capsys.readouterr().out
    assert re.search(r"files rrf-plain\s+p50 [\d.]+ ms", out)
    assert re.search(r"files hybrid\s+p50 [\d.]+ ms", out)
    assert re.search(r"hybrid / rrf-plain p50: [\d.]+", out)


def test_every_lab_module_needs_a_data_path(monkeypatch, embedder, tmp_path) -> None:
    monkeypatch.delenv("LOCOMO_DATA", raising=False)
    with pytest.raises(SystemExit, match="--data"):
        presets.main(["--cache", str(tmp_path), "--sets", "locomo-turns"], embedder=embedder)


def test_lab_modules_have_no_path_outside_the_repository() -> None:
    root = Path(presets.__file__).parent
    for module in root.glob("*.py"):
        text = module.read_text()
        assert "sys.path" not in text, module
        assert "shared/data" not in text.replace("../shared/data/locomo-dev.json", ""), module


def test_observability_overhead_writes_each_figure(tmp_path) -> None:
    import logging

    from benchmarks.latency import observability

    access = logging.getLogger("memory_service.access")
    before = (access.handlers[:], access.propagate, access.level)
    out = tmp_path / "observability.json"
    observability.main(["--n", "20", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert {"off_us", "on_us", "metrics_only_us", "added_us", "load_average"} <= set(figures)
    assert figures["on_us"] > 0
    # the access logger is the service's own: the run leaves it as it found it, so the
    # service's later access lines in this process do not go to a deleted file
    assert (access.handlers, access.propagate, access.level) == before


def test_scopes_latency_times_each_scope_set(embedder, tmp_path) -> None:
    from benchmarks.latency import scopes

    out = tmp_path / "scopes.json"
    args = ["--facts", "8", "--shared", "4", "--rounds", "1", "--json", str(out)]
    doc = scopes.main(args, embedder=embedder)
    assert json.loads(out.read_text()) == doc
    assert set(doc["search_ms"]) == {"user", "user+tenant", "user+agent+tenant"}
    assert doc["queries_per_variant"] > 0


def test_token_counting_compares_the_heuristic_with_cl100k(tmp_path, capsys) -> None:
    from benchmarks.latency import token_counting

    out = tmp_path / "tokens.json"
    mini = Path(__file__).resolve().parents[1] / "fixtures" / "locomo_mini.json"
    assert token_counting.main(["--path", str(mini), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    turns = doc["locomo_turns"]
    assert turns["texts"] > 0 and turns["tokens"]["cl100k"] > 0
    assert 0.5 < turns["ratio_total"] < 2.0
    assert "locomo_turns" in capsys.readouterr().out


def test_session_stores_times_each_store(tmp_path, capsys) -> None:
    from benchmarks.latency import session_stores

    out = tmp_path / "stores.json"
    assert session_stores.main(["--rounds", "3", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["files"]["save"]["p50"] > 0 and doc["files"]["load"]["p50"] > 0
    assert "files" in capsys.readouterr().out


def test_reindex_latency_reindexes_every_point_once(tmp_path) -> None:
    from benchmarks.latency import reindex

    out = tmp_path / "reindex.json"
    reindex.main(["--sizes", "30", "--json", str(out)])
    (row,) = json.loads(out.read_text())["edge_reindex"]
    assert row["points"] == 30 and row["first_open_s"] > 0 and row["next_open_s"] > 0


def test_reembed_latency_moves_every_fact_on_both_backends(tmp_path) -> None:
    from benchmarks.latency import reembed

    out = tmp_path / "reembed.json"
    reembed.main(["--sizes", "12", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["backend"], r["facts"]) for r in rows] == [("files", 12), ("qdrant-edge", 12)]
    assert all(r["reembed_s"] > 0 and r["check_us_median"] > 0 for r in rows)


@pytest.mark.parametrize("cached", [[], ["--query-cached"]], ids=["embedding", "query-cached"])
def test_recall_stages_times_both_backends_beside_the_embedding(
    lab, tmp_path, capsys, cached
) -> None:
    from benchmarks.latency import recall_stages

    out = tmp_path / "stages.json"
    assert recall_stages.main([*lab[:2], "--rounds", "1", *cached, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["query_cached"] is bool(cached)
    assert set(doc["latency_ms"]) == {"embedding", "files", "qdrant"}
    assert doc["ratios"]["qdrant / files"] > 0
    assert "Edge: engine query" in doc["stages_ms"]["qdrant"]
    assert "files: candidates (BM25 + matrix)" in doc["stages_ms"]["files"]
    printed = capsys.readouterr().out
    assert "query embedding (model)" in printed and "qdrant / files" in printed


@pytest.mark.postgres
def test_recall_stages_times_postgres_beside_files(lab, tmp_path, pgvector_dsn) -> None:
    from benchmarks.latency import recall_stages

    out = tmp_path / "stages.json"
    backends = "files,postgres,postgres-statement"
    argv = [*lab[:2], "--rounds", "1", "--backends", backends, "--postgres", pgvector_dsn]
    assert recall_stages.main([*argv, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["latency_ms"]) == {"embedding", "files", "postgres", "postgres-statement"}
    assert doc["ratios"]["postgres / files"] > 0
    assert doc["ratios"]["postgres-statement / files"] > 0
    stages = doc["stages_ms"]
    assert stages["postgres"]["PostgreSQL: kept rows scored"] > 0
    assert "PostgreSQL: the statement" not in stages["postgres"]  # every owner kept
    assert stages["postgres-statement"]["PostgreSQL: the statement"] > 0


def test_embedding_overlap_times_the_lexical_recall_beside_and_during_the_embedding(
    lab, tmp_path, capsys
) -> None:
    from benchmarks.latency import embedding_overlap

    out = tmp_path / "overlap.json"
    assert embedding_overlap.main([*lab[:2], "--rounds", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["latency_ms"]) == set(embedding_overlap.VARIANTS)
    assert all(row["p50"] > 0 for row in doc["latency_ms"].values())
    assert doc["threads"] >= 1 and doc["questions"] > 0
    assert "at once saves" in capsys.readouterr().out


def test_backends_at_scale_records_and_recalls_both_backends_taking_turns(tmp_path, capsys):
    from benchmarks.latency import backends_at_scale

    out = tmp_path / "scale.json"
    argv = ["--facts", "10", "--users", "2", "--queries", "2", "--json", str(out)]
    assert backends_at_scale.main(argv) == 0
    doc = json.loads(out.read_text())
    assert set(doc["record"]) == {"files", "qdrant-edge"}
    assert all(r["facts_per_s"] > 0 for r in doc["record"].values())
    assert set(doc["recall_ms"]) == {"embedding", "files", "qdrant-edge"}
    assert doc["queries"] == 2 and doc["ratios"]["qdrant-edge / files"] > 0
    printed = capsys.readouterr().out
    assert "qdrant-edge / files record rate" in printed and "qdrant-edge / files" in printed


@pytest.mark.postgres
def test_backends_at_scale_takes_postgres_in_its_turns(tmp_path, capsys, pgvector_dsn):
    from benchmarks.latency import backends_at_scale

    out = tmp_path / "scale.json"
    argv = ["--facts", "10", "--users", "2", "--queries", "2", "--backends", "files,postgres"]
    argv += ["--postgres", pgvector_dsn, "--embed-once", "--json", str(out)]
    assert backends_at_scale.main(argv) == 0
    doc = json.loads(out.read_text())
    assert set(doc["recall_ms"]) == {"embedding", "files", "postgres"}
    assert doc["record"]["postgres"]["facts_per_s"] > 0 and doc["ratios"]["postgres / files"] > 0
    assert "postgres / files record rate" in capsys.readouterr().out


def test_near_duplicates_measures_made_up_pairs_and_locomo_facts(lab, embedder, tmp_path, capsys):
    out_file = tmp_path / "near-duplicates.json"
    assert near_duplicates.main([*lab, "--json", str(out_file)], embedder=embedder) == 0
    out = capsys.readouterr().out
    result = json.loads(out_file.read_text())
    made_up = {*near_duplicates.CHANGES, "negation", "swap", "route", "rewording", "reordered"}
    assert set(result["pairs"]) == made_up
    for kind, row in result["pairs"].items():
        assert f"  {kind} " in out
        assert row["merged"] <= row["above"]["0.9"]
        if kind != "rewording":  # the guard keeps every changed value (and order) apart
            assert row["merged"] == 0.0, kind
    assert result["pairs"]["rewording"]["merged"] > 0.5
    assert result["locomo"]["facts"] > 0
    assert "LoCoMo observation facts" in out


def test_session_archive_replays_sessions_and_scores_the_archived_events(
    lab, embedder, tmp_path, capsys
):
    written = tmp_path / "archive.json"
    assert session_archive.main([*lab[:2], "--json", str(written)], embedder=embedder) == 0
    out = capsys.readouterr().out
    archived = re.search(r"session archive \(no model\)\s+([\d.]+) +([\d.]+) +([\d.]+)", out)
    turns = re.search(r"bench --unit turns\s+([\d.]+) +([\d.]+) +([\d.]+)", out)
    assert archived and turns, out
    assert "16 messages appended" in out
    figures = json.loads(written.read_text())
    assert figures["archive"]["questions"] == 8 and figures["archive"]["R@25"] > 0
    # the archive writes each turn as the bench's turns unit does: the same recall
    assert figures["archive"] == figures["bench_turns"]


@pytest.mark.subprocess  # a real ``serve`` behind the searches and deletes
@pytest.mark.slow
def test_edge_delete_sets_the_p95_during_deletes_against_two_phases_without(
    tmp_path, capsys
) -> None:
    from benchmarks.latency import edge_delete

    out = tmp_path / "edge_delete.json"
    argv = ["--facts", "60", "--deletes", "2", "--rounds", "1", "--seconds", "0.5"]
    edge_delete.main([*argv, "--pause", "0.05", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["trees"]["this"]["delete"]["n"] == 2
    assert doc["search_errors"] == {"this": {}}
    assert doc["unreadable_after_s"]["this"][0] is not None  # the rewrite ran and finished
    (row,) = doc["search_p95_by_round"]["this"]
    assert min(row["alone_before"], row["during_deletes"], row["alone_after"]) > 0
    assert row["slowest_during_deletes"] >= row["during_deletes"]
    assert row["slowest_alone"] >= max(row["alone_before"], row["alone_after"])
    assert set(doc["search_p95_verdict"]["this"]) == {
        "mean_above_alone_ms",
        "mean_alone_to_alone_ms",
        "within_noise",
    }
    assert "| alone to alone |" in capsys.readouterr().out


def test_edge_delete_verdict_weighs_the_excess_against_the_phases_without_deletes() -> None:
    from benchmarks.latency.edge_delete import RoundP95, verdict

    steady = [RoundP95(6.0, 6.2, 6.4), RoundP95(6.4, 6.2, 6.0)]
    assert verdict(steady) == {
        "mean_above_alone_ms": 0.0,
        "mean_alone_to_alone_ms": 0.4,
        "within_noise": True,
    }
    slowed = [RoundP95(6.0, 7.5, 6.2), RoundP95(6.1, 7.4, 6.0)]
    assert verdict(slowed)["within_noise"] is False
