"""Loaders on small invented fixtures in each format, and the synthetic generator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_service.domain.facts import Source
from memory_service.evaluation.dataset import BenchInputError, fit_text, safe_user_id
from memory_service.evaluation.datasets import load_dataset
from memory_service.evaluation.datasets.locomo import load_locomo, parse_evidence
from memory_service.evaluation.datasets.longmemeval import load_longmemeval
from memory_service.evaluation.datasets.synthetic import generate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOCOMO = FIXTURES / "locomo_mini.json"
LONGMEMEVAL = FIXTURES / "longmemeval_mini.json"
CELLO_TURNS = (
    "Nora: I started cello lessons last month, it is harder than it looks. "
    "Nora: My teacher says I should practise scales every morning."
)


def _questions(dataset):
    return {q.text: q for c in dataset.conversations for q in c.questions}


@pytest.mark.parametrize(
    ("raw", "ids"),
    [
        ("D1:3", ["D1:3"]),
        ("D8:6; D9:17", ["D8:6", "D9:17"]),
        ("D:11:26", ["D11:26"]),
        ("D30:05", ["D30:5"]),
        ("D", []),
        ("", []),
        (None, []),
    ],
)
def test_evidence_ids_are_normalised(raw, ids):
    assert parse_evidence(raw) == ids


def test_locomo_turns_carry_their_dia_ids_and_speaker():
    dataset = load_dataset("locomo", path=LOCOMO, unit="turns")
    first = dataset.conversations[0]
    assert [c.id for c in dataset.conversations] == ["conv-test-1", "conv-test-2"]
    assert len(first.items) == 10  # six turns in session 1, four in session 2; none in 3
    assert first.items[0].text.startswith("Nora: Guess what")
    assert first.items[0].refs == ("D1:1",)
    assert [i.refs[0] for i in first.items][-4:] == ["D2:1", "D2:2", "D2:3", "D2:4"]


def test_locomo_turn_text_styles():
    data = json.loads(LOCOMO.read_text())
    plain = load_locomo(data, unit="turns", turn_text="plain").conversations[0].items
    captioned = load_locomo(data, unit="turns", turn_text="speaker+caption").conversations[0]
    assert plain[3].text == plain[4].text == "See you tomorrow."
    assert captioned.items[5].text == (
        "Theo: Look who I met at the lake! [shares a photo: a photo of a golden retriever "
        "sitting on a dock]"
    )


def test_locomo_questions_gold_skips_and_counts():
    dataset = load_dataset("locomo", path=LOCOMO, unit="turns")
    questions = _questions(dataset)
    assert dataset.question_count == 7
    assert questions["Which projects did Nora take on in 2022?"].gold == {"D1:3", "D2:1"}
    assert questions["When did Theo's sister move to Halifax?"].gold == {"D2:2"}
    assert questions["How often does Nora practise scales?"].gold == {"D2:3"}
    mixed = questions["Which instrument is Nora learning, and who teaches her?"]
    assert mixed.gold == {"D2:1"} and mixed.category == "1 multi-hop"
    assert questions["What colour is Nora's sailboat?"].category == "4 single-hop"
    assert "What colour is Theo's sailboat?" not in questions  # adversarial
    assert dict(dataset.skipped) == {
        "category 5 (adversarial, no answer)": 1,
        "no evidence ids": 1,
        "no evidence id resolves to a turn": 1,
    }
    assert dataset.notes["evidence ids resolving to no turn (dropped)"] == 2  # D9:9, D7:7
    assert dataset.notes["evidence entries unreadable (dropped)"] == 1  # "D"
    assert dataset.categories == ("1 multi-hop", "2 temporal", "3 open-domain", "4 single-hop")


def test_locomo_observation_facts_link_to_their_turns():
    dataset = load_dataset("locomo", path=LOCOMO, unit="facts")
    items = {i.text: i for i in dataset.conversations[0].items}
    assert len(items) == 5
    cello = items["Nora takes cello lessons and practises scales every morning."]
    assert cello.refs == ("D2:1", "D2:3")
    assert items["Nora likes quiet evenings."].refs == ()  # D8:1 is no turn
    assert dataset.notes["observations linked to no turn"] == 1
    assert dataset.question_count == 7  # questions do not depend on the unit


def test_locomo_facts_carry_their_source_turns_unless_asked_not_to():
    items = {
        i.text: i for i in load_dataset("locomo", path=LOCOMO, unit="facts").conversations[0].items
    }
    cello = items["Nora takes cello lessons and practises scales every morning."].to_fact()
    assert cello.source == Source("locomo", "session_2", (1, 3), CELLO_TURNS)
    assert items["Nora likes quiet evenings."].source is None  # D8:1 is no turn: no text
    bare = load_dataset("locomo", path=LOCOMO, unit="facts", with_source=False)
    assert all(i.source is None for c in bare.conversations for i in c.items)
    assert [i.text for i in bare.conversations[0].items] == list(items)  # the same facts
    turns = load_dataset("locomo", path=LOCOMO, unit="turns")
    assert all(i.source is None for c in turns.conversations for i in c.items)


def test_longmemeval_turns_name_their_session_and_position():
    multi = load_dataset("longmemeval", path=LONGMEMEVAL).conversations[0]
    assert {i.source for i in multi.items} >= {Source("longmemeval", "answer_fx0001_2", (2,))}
    assert all(i.source.text is None for i in multi.items)  # the memory is the message


def test_locomo_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(BenchInputError, match="--path"):
        load_dataset("locomo")
    with pytest.raises(BenchInputError, match="no such file"):
        load_dataset("locomo", path=tmp_path / "missing.json")
    with pytest.raises(BenchInputError, match="--unit"):
        load_dataset("locomo", path=LOCOMO, unit="sessions")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BenchInputError, match="JSON"):
        load_dataset("locomo", path=broken)


def test_longmemeval_turns_user_only_gold_from_has_answer():
    dataset = load_dataset("longmemeval", path=LONGMEMEVAL)
    assert dataset.unit == "turns"
    assert [c.id for c in dataset.conversations] == ["fx0001", "fx0002"]
    multi = dataset.conversations[0]
    assert len(multi.items) == 5  # user turns only (1 + 2 + 2), over three sessions
    assert all(not i.text.startswith(("Sure", "That is", "It may")) for i in multi.items)
    (question,) = multi.questions
    assert question.gold == {"answer_fx0001_1_1", "answer_fx0001_2_3"}
    assert question.category == "multi-session"
    assert dict(dataset.skipped) == {
        "abstention (no evidence)": 1,
        "evidence not in any user turn": 1,
    }


def test_longmemeval_sessions_unit_credits_a_turn_to_its_session():
    dataset = load_dataset("longmemeval", path=LONGMEMEVAL, unit="sessions")
    multi = dataset.conversations[0]
    assert multi.questions[0].gold == {"answer_fx0001_1", "answer_fx0001_2"}
    assert {i.refs for i in multi.items} == {
        ("sharegpt_noise_1",),
        ("answer_fx0001_1",),
        ("answer_fx0001_2",),
    }


def test_longmemeval_rejects_a_wrong_shape():
    with pytest.raises(BenchInputError):
        load_longmemeval({"question_id": "x"})
    with pytest.raises(BenchInputError, match="haystack_sessions"):
        load_longmemeval([{"question_id": "x", "question": "q", "haystack_session_ids": []}])


def test_synthetic_is_deterministic_and_complete():
    one, again, other = generate(4, seed=3), generate(4, seed=3), generate(4, seed=4)
    texts = [[i.text for i in c.items] for c in one.conversations]
    assert texts == [[i.text for i in c.items] for c in again.conversations]
    assert texts != [[i.text for i in c.items] for c in other.conversations]
    categories = {q.category for c in one.conversations for q in c.questions}
    assert categories == set(one.categories)
    kinds = {i.kind for c in one.conversations for i in c.items}
    assert kinds == {"fact", "preference", "event", "procedure"}
    assert any("的" in i.text or "は" in i.text for i in one.conversations[0].items)
    for conversation in one.conversations:
        by_ref = {i.refs[0]: i for i in conversation.items}
        for question in conversation.questions:
            assert question.gold <= by_ref.keys()
            for ref in question.stale:  # an outdated fact shares the key of the gold one
                (gold,) = question.gold
                assert by_ref[ref].key == by_ref[gold].key is not None
                assert by_ref[ref].created_at < by_ref[gold].created_at


def test_helpers_make_safe_ids_and_short_texts():
    assert safe_user_id("conv-26") == "conv-26"
    assert safe_user_id("gpt4/abc..d ef") == "gpt4-abc-d-ef"
    text, cut = fit_text("é" * 5000)
    assert cut and len(text.encode()) <= 8192 and set(text) == {"é"}
    assert fit_text("short") == ("short", False)


def test_synthetic_zh_is_seeded_and_asks_every_way_across_two_languages():
    from memory_service.evaluation.datasets import synthetic_zh

    dataset = load_dataset("synthetic-zh")
    again = synthetic_zh.generate()
    other = synthetic_zh.generate(seed=8)
    texts = [[i.text for i in c.items] for c in dataset.conversations]
    assert texts == [[i.text for i in c.items] for c in again.conversations]
    assert texts != [[i.text for i in c.items] for c in other.conversations]
    asked = [q for c in dataset.conversations for q in c.questions]
    assert len(asked) >= 300
    counts = {c: sum(q.category == c for q in asked) for c in synthetic_zh.CATEGORIES}
    assert min(counts.values()) >= 60, counts
    for conversation in dataset.conversations:
        refs = {r for item in conversation.items for r in item.refs}
        assert all(q.gold and q.gold <= refs for q in conversation.questions)
        probes = {p.category for p in conversation.probes}
        assert probes == set(synthetic_zh.PROBE_CATEGORIES)
        assert all(not p.gold for p in conversation.probes)
    first = dataset.conversations[0]  # 王小明: his English memories say Wang Xiaoming
    assert synthetic_zh.romanised("王小明") == "Wang Xiaoming"
    assert any("Wang Xiaoming" in item.text for item in first.items)
    assert any("王小明" in item.text for item in first.items)
    with pytest.raises(BenchInputError, match="one unit: facts"):
        load_dataset("synthetic-zh", unit="turns")
