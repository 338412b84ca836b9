"""Qdrant Edge asks its engine for candidates' ids and scores alone and reads their fields
(key, session, time, BM25 terms), and the facts it returns, from what this process holds
(``edge.held_points``): whatever a write changes, the next recall reads as written."""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest

from memory_service.config import QdrantSettings
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.facts import Fact
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory, open_qdrant
from memory_service.longterm.qdrant.edge.engine import _entry as read_entry
from memory_service.longterm.qdrant.edge.held_points import HeldPoints, point_key
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import SPARSE
from memory_service.longterm.qdrant.query_plan import CANDIDATE_FIELDS

ALICE = RuntimeContext("acme", "alice")
TENANT = scope_context("acme", "tenant")
GENERAL = "Support hours are nine to five"
OWN = "Alice's support hours are eight to four"


@pytest.fixture
def asked(tmp_path, embedder):
    """Edge with every scope asked of the engine (no shared scope held in memory), so a
    wider scope's keys come from the candidates' fields."""
    held = open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)
    memory = QdrantLongTermMemory(held.engine, embedder, hold_shared_scopes=False)
    yield memory
    held.close()


def _texts(recalls) -> list[str]:
    return sorted(r.fact.text for r in recalls)


def test_a_wider_facts_key_changed_after_a_recall_is_read_by_the_next(asked):
    asked.record(ALICE, [Fact(GENERAL, key="hours", scope="tenant"), Fact(OWN, key="hours")])
    assert _texts(asked.retrieve(ALICE, "support hours", 5)) == [OWN]  # the fields now held
    (general,) = asked.list(TENANT).items
    assert asked.update(TENANT, [replace(general, key="hours.general")]) == 1
    assert _texts(asked.retrieve(ALICE, "support hours", 5)) == [OWN, GENERAL]
    assert asked.update(TENANT, [replace(general, key="hours")]) == 1
    assert _texts(asked.retrieve(ALICE, "support hours", 5)) == [OWN]


def test_a_deleted_candidate_is_never_recalled_from_what_was_held(asked):
    ids = [r.id for r in asked.record(ALICE, [Fact(OWN), Fact("Alice works at the help desk")])]
    assert len(asked.retrieve(ALICE, "support hours help desk", 5)) == 2
    assert asked.delete(ALICE, ids[:1]) == 1
    assert [r.fact.id for r in asked.retrieve(ALICE, "support hours help desk", 5)] == ids[1:]


def test_a_recalled_fact_changed_by_a_write_is_recalled_as_written(asked):
    asked.record(ALICE, [Fact(OWN, tags=("hours",))])
    (first,) = asked.retrieve(ALICE, "support hours", 5)  # the whole fact now held
    assert asked.update(ALICE, [replace(first.fact, tags=("hours", "desk"))]) == 1
    (again,) = asked.retrieve(ALICE, "support hours", 5)
    assert again.fact.tags == ("hours", "desk")


def test_a_fill_read_before_a_write_is_not_kept():
    fields = HeldPoints(limit=10)
    epoch = fields.epoch
    fields.forget(["a"])  # a write landed between the read and the fill
    fields.fill({"a": ({"key": "old"}, array("I"))}, epoch)
    assert fields.held(["a"]) == ({}, ["a"])
    fields.fill({"a": ({"key": "new"}, array("I", [7]))}, fields.epoch)
    assert fields.held(["a"]) == ({"a": ({"key": "new"}, array("I", [7]))}, [])


def test_the_least_recently_read_points_go_first_past_the_limit():
    fields = HeldPoints(limit=2)
    fields.fill({"a": ({}, array("I")), "b": ({}, array("I"))}, fields.epoch)
    fields.held(["a"])  # read: "b" is now the least recent
    fields.fill({"c": ({}, array("I"))}, fields.epoch)
    assert sorted(fields.held(["a", "b", "c"])[0]) == ["a", "c"]
    fields.forget()
    assert len(fields) == 0


def test_a_recorded_point_is_held_as_a_read_of_it_would_hold_it(asked):
    """What a record holds of its points (so a recall of them reads nothing from the shard)
    is what reading them back gives, field for field and term for term."""
    facts = [
        Fact(OWN, key="hours", session_id="s1", source="I work eight to four these days"),
        Fact("Alice works at the help desk", tags=("work",)),
        Fact(GENERAL, key="hours", scope="tenant"),
    ]
    recorded = asked.record(ALICE, facts)
    engine = asked.engine
    held, missing = engine._fields.held([point_key(r.id) for r in recorded])
    assert missing == []
    for r in recorded:
        fields, terms, created_at, point_id = held[point_key(r.id)]
        (record,) = engine._shard.retrieve([r.id], list(CANDIDATE_FIELDS), [SPARSE])
        want_fields, want_terms, want_created, want_id = read_entry(record)
        assert fields == want_fields
        assert sorted(terms) == sorted(want_terms) and len(terms) > 0
        assert created_at == want_created is not None
        assert point_id == want_id == r.id


def test_a_write_holds_what_it_wrote_unless_another_write_overlapped_it():
    fields = HeldPoints(limit=10)
    began = fields.forget(["a"])
    fields.fill({"a": ({"key": "read mid-write"}, array("I"))}, fields.epoch)
    fields.hold_written({"a": ({"key": "written"}, array("I", [1]))}, began)
    assert fields.held(["a"])[0]["a"][0] == {"key": "written"}

    first = fields.forget(["a"])
    second = fields.forget(["a"])  # another write of "a" began before the first ended
    fields.hold_written({"a": ({"key": "first"}, array("I"))}, first)
    assert fields.held(["a"]) == ({}, ["a"])
    fields.hold_written({"a": ({"key": "second"}, array("I"))}, second)
    assert fields.held(["a"]) == ({}, ["a"])  # which of the two landed last is unknown


def test_an_access_note_keeps_the_fields_held_and_a_key_change_drops_them(asked):
    (recorded,) = asked.record(ALICE, [Fact(OWN, key="hours")])
    engine, scope = asked.engine, OwnerFilter.of(ALICE, ids=[recorded.id])
    key = point_key(recorded.id)
    engine.set_payload(scope, {recorded.id: {"access_count": 3}})
    assert engine._fields.held([key])[1] == []
    engine.set_payload(scope, {recorded.id: {"key": "hours.desk"}})
    assert engine._fields.held([key]) == ({}, [key])
    (again,) = asked.retrieve(ALICE, "support hours", 5)
    assert (again.fact.key, again.fact.access_count) == ("hours.desk", 3)


def test_a_delete_forgets_what_is_held_of_the_deleted_points_alone(asked):
    """A search after a delete reads again only what the delete changed, and the rewrite
    that takes the deleted text out of the folder keeps what is held (the same points)."""
    ids = [r.id for r in asked.record(ALICE, [Fact(OWN), Fact("Alice works at the help desk")])]
    assert len(asked.retrieve(ALICE, "support hours help desk", 5)) == 2  # both now held
    engine, keys = asked.engine, [point_key(i) for i in ids]
    assert asked.delete(ALICE, ids[:1]) == 1
    held, missing = engine._fields.held(keys)
    assert (list(held), missing) == ([keys[1]], [keys[0]])
    assert engine.compaction.wait(timeout=60)  # the shard rewritten and swapped in
    assert engine._fields.held(keys[1:])[1] == []
    assert [r.fact.id for r in asked.retrieve(ALICE, "support hours help desk", 5)] == ids[1:]
