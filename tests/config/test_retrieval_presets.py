"""The retrieval strategy as data: honest defaults, built-in presets, presets of one's own."""

from __future__ import annotations

import pytest

from memory_service.config import PRESETS, RetrievalConfig, load_settings, preset
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConfigurationError, InvalidInputError
from memory_service.domain.facts import Fact
from memory_service.services import build_longterm

ALICE = RuntimeContext("acme", "alice")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_LONGTERM__RETRIEVAL_PRESET"):
        monkeypatch.delenv(name, raising=False)


def _config_file(tmp_path, monkeypatch, text: str) -> None:
    path = tmp_path / "memory.toml"
    path.write_text(text)
    monkeypatch.setenv("MEMORY_CONFIG", str(path))


def test_the_model_defaults_are_the_default_preset():
    assert RetrievalConfig() == PRESETS["hybrid"]
    assert RetrievalConfig().fusion == "zscore"
    plain = PRESETS["rrf-plain"]
    assert (plain.fusion, plain.neighbour_weight, plain.date_terms) == ("rrf", 0.0, False)


def test_a_custom_preset_from_the_toml_file_ranks_searches(tmp_path, monkeypatch, embedder):
    _config_file(
        tmp_path,
        monkeypatch,
        f'workspace = "{tmp_path / "ws"}"\n'
        '[longterm]\nretrieval_preset = "flat-rrf"\n'
        '[longterm.presets.flat-rrf]\nfusion = "rrf"\nrrf_k = 10\n'
        "neighbour_weight = 0.0\ndate_terms = false\n",
    )
    settings = load_settings()
    strategy = settings.longterm.retrieval()
    assert (strategy.name, strategy.fusion, strategy.rrf_k) == ("flat-rrf", "rrf", 10.0)
    memory = build_longterm(settings, embedder)
    try:
        memory.record(
            ALICE,
            [Fact(text="Alice is allergic to peanuts"), Fact(text="Alice lives in Lisbon")],
        )
        top = memory.retrieve(ALICE, "peanuts allergy", top_k=2)[0]
    finally:
        memory.close()
    assert top.fact.text == "Alice is allergic to peanuts"
    assert top.ranks == {"bm25": 1, "dense": 1}
    # Reciprocal Rank Fusion with k = 10: first in both legs scores 2 / (10 + 1)
    assert top.score == pytest.approx(2 / 11)


def test_custom_presets_are_checked_at_start(tmp_path, monkeypatch):
    _config_file(tmp_path, monkeypatch, '[longterm.presets.hybrid]\nfusion = "rrf"\n')
    with pytest.raises(ConfigurationError, match="may not reuse a built-in name: hybrid"):
        load_settings()
    _config_file(tmp_path, monkeypatch, '[longterm.presets.mine]\nfusion = "borda"\n')
    with pytest.raises(ConfigurationError, match="MEMORY_LONGTERM__PRESETS__MINE__FUSION"):
        load_settings()
    _config_file(tmp_path, monkeypatch, "[longterm.presets.mine]\nrank_k = 5\n")
    with pytest.raises(ConfigurationError, match="MEMORY_LONGTERM__PRESETS__MINE__RANK_K"):
        load_settings()
    _config_file(tmp_path, monkeypatch, '[longterm]\nretrieval_preset = "nosuch"\n')
    with pytest.raises(ConfigurationError, match="unknown retrieval preset 'nosuch'"):
        load_settings()


def test_a_custom_preset_sets_the_query_coverage_and_a_bad_one_stops_the_start(
    tmp_path, monkeypatch
):
    _config_file(
        tmp_path,
        monkeypatch,
        '[longterm]\nretrieval_preset = "coord"\n'
        "[longterm.presets.coord]\nlexical_coverage = 1.0\n",
    )
    strategy = load_settings().longterm.retrieval()
    assert (strategy.name, strategy.lexical_coverage) == ("coord", 1.0)
    assert PRESETS["hybrid"].lexical_coverage == 0.5  # the default (RESULTS.md: query coverage)
    _config_file(tmp_path, monkeypatch, "[longterm.presets.mine]\nlexical_coverage = -1\n")
    with pytest.raises(
        ConfigurationError, match="MEMORY_LONGTERM__PRESETS__MINE__LEXICAL_COVERAGE"
    ):
        load_settings()


def test_preset_lookup_knows_custom_names():
    mine = RetrievalConfig(name="mine", fusion="rrf")
    assert preset("mine", {"mine": mine}) is mine
    with pytest.raises(InvalidInputError) as caught:
        preset("nosuch", {"mine": mine})
    assert caught.value.code == "invalid_preset"
    assert "mine" in str(caught.value)
