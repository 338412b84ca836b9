"""Recall in Chinese as in English, with each bundled embedder, on every backend: the harness's
threshold keeps off-topic questions out in both languages, and a model that does not read a
question's language does not outvote its clear lexical match."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from indexing.embeddings import CachedEmbedder, Embedder
from indexing.scripts import script_of
from memory_service.config.memory_settings import MemorySettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.protocol import LongTermMemory
from tests.support.backends import LONGTERM_BACKENDS

CTX = RuntimeContext("tenant", "xiaoming")
HARNESS_THRESHOLD = MemorySettings.model_fields["recall_threshold"].default

# One user's memories, as an agent records them about him (he: 王小明).
FACTS = (
    "他每天早上跑步五公里。",
    "他害怕坐飞机。",
    "他的车是比亚迪。",
    "他的女儿在北京读小学。",
    "他最喜欢吃四川火锅。",
    "他是一名中学数学老师。",
    "他对花生过敏。",
    "他养了一只橘猫。",
    "他的老家在哈尔滨。",
    "他周末喜欢钓鱼。",
    "他正在学习日语。",
    "他明年春天打算去云南旅行。",
    "他的生日是三月十二日。",
    "He drinks two cups of coffee every day.",
    "His wife works as a nurse at the city hospital.",
)
OFF_TOPIC = ("今天天气怎么样？", "股票市场明天会涨吗？", "What is the capital of Peru?")


@pytest.fixture(scope="module")
def e5() -> Embedder:
    from indexing.e5_embeddings import E5Embedder

    return CachedEmbedder(E5Embedder())


@pytest.fixture(params=["minilm", "e5"])
def stored(request, tmp_path: Path, embedder: Embedder) -> Iterator[LongTermMemory]:
    """The user's memories on the files backend, with each bundled embedder."""
    model = embedder if request.param == "minilm" else request.getfixturevalue("e5")
    memory = LONGTERM_BACKENDS["files"](tmp_path, model)
    memory.record(CTX, [Fact(text) for text in FACTS])
    try:
        yield memory
    finally:
        memory.close()


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_an_off_topic_question_injects_nothing_at_the_harness_threshold(stored, question):
    assert stored.retrieve(CTX, question, 6, HARNESS_THRESHOLD) == []


def test_a_real_chinese_question_still_finds_its_memory_at_the_harness_threshold(stored):
    recalls = stored.retrieve(CTX, "他的女儿在哪里读小学？", 6, HARNESS_THRESHOLD)
    assert recalls and recalls[0].fact.text == "他的女儿在北京读小学。"


def test_a_real_english_question_still_finds_its_memory_at_the_harness_threshold(stored):
    recalls = stored.retrieve(CTX, "How many cups of coffee does he drink?", 6, HARNESS_THRESHOLD)
    assert recalls and recalls[0].fact.text == "He drinks two cups of coffee every day."


def test_a_clear_lexical_match_is_not_drowned_by_the_dense_leg(memory: LongTermMemory):
    """all-MiniLM-L6-v2 (the default) puts 他害怕坐飞机 at cosine 0.87 to 他开什么车 and the car
    at 0.64, where BM25 gives the car 2.5 and every other memory under 0.1."""
    memory.record(CTX, [Fact(text) for text in FACTS if script_of(text) == "cjk"])
    recalls = memory.retrieve(CTX, "他开什么车？", 3)
    assert recalls[0].fact.text == "他的车是比亚迪。"


@pytest.mark.parametrize("backend", sorted(LONGTERM_BACKENDS))
def test_a_chinese_question_finds_its_english_memory_first_with_e5(tmp_path: Path, e5, backend):
    """The lexical leg holds no Chinese question's words in an English memory; read as a miss,
    its silence put the user's job (他是一名中学数学老师) and other Chinese memories first."""
    memory = LONGTERM_BACKENDS[backend](tmp_path, e5)
    try:
        memory.record(CTX, [Fact(text) for text in FACTS])
        recalls = memory.retrieve(CTX, "他的妻子做什么工作？", 3)
        assert recalls[0].fact.text == "His wife works as a nurse at the city hospital."
    finally:
        memory.close()


def test_a_chinese_question_word_is_no_part_of_the_evidence(stored):
    """什么 in a question is never in the memory answering it: counted in the question's IDF
    mass, it left 他害怕坐飞机 under the lexical evidence a MiniLM recall at a threshold needs."""
    recalls = stored.retrieve(CTX, "他怕什么？", 6, HARNESS_THRESHOLD)
    assert recalls and recalls[0].fact.text == "他害怕坐飞机。"
