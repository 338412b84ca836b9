"""The time benchmark: deterministic data, exact as-of answers, no stale keyed answer."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.evaluation.datasets import synthetic_time
from memory_service.evaluation.timeline import run_time

ANCHOR = datetime(2026, 6, 1, tzinfo=UTC)


def test_the_dataset_is_deterministic_and_changes_over_time():
    one = synthetic_time.generate(users=3, seed=5, anchor=ANCHOR)
    two = synthetic_time.generate(users=3, seed=5, anchor=ANCHOR)
    assert [i.fact for u in one.users for i in u.items] == [
        i.fact for u in two.users for i in u.items
    ]
    categories = {q.category for u in one.users for q in u.questions}
    assert categories == set(synthetic_time.CATEGORIES)
    for user in one.users:
        for q in user.questions:
            if q.category == "as-of":
                assert q.as_of is not None and q.as_of < ANCHOR and q.key is not None
                gold = next(i.fact for i in user.items if i.ref == q.gold)
                assert gold.created_at <= q.as_of and gold.key == q.key


def test_as_of_is_exact_and_a_keyed_answer_is_never_stale(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(workspace=tmp_path / "ws")
    dataset = synthetic_time.generate(users=3, seed=7)
    doc = run_time(settings, embedder, dataset, ("hybrid", "hybrid-recency"), workdir=tmp_path)
    for run in doc["runs"]:
        assert run["accuracy"]["as-of"] == 1.0
        assert run["stale"]["latest-keyed"] == 0.0 and run["stale"]["as-of"] == 0.0
    assert [r["preset"] for r in doc["runs"]] == ["hybrid", "hybrid-recency"]


def test_the_command_refuses_scale_for_the_time_dataset(capsys, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    assert main(["bench", "--dataset", "synthetic-time", "--scale", "100"]) == 2
    assert "synthetic-time" in capsys.readouterr().err
