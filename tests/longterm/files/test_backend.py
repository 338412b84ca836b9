"""The files backend: fact files a person can read and edit, and that survive hostile text."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.files.fact_files import parse_fact_file, render_fact

ALICE = RuntimeContext("acme", "alice")


@pytest.fixture
def files_memory(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    yield memory
    memory.close()


def _ledgers(memory: FileSystemLongTermMemory) -> list[Path]:
    return sorted(memory.paths(ALICE).ledger_dir.glob("*.md"))


def _touch_later(path: Path) -> None:
    """Make sure a hand edit gets a new mtime even on coarse-grained clocks."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_facts_land_in_todays_ledger_as_readable_bullets(files_memory):
    files_memory.record(ALICE, [Fact("Alice is allergic to peanuts", key="user.allergy")])
    [ledger] = _ledgers(files_memory)
    assert ledger.parent == files_memory.workspace / "tenants/acme/users/alice/memory"
    content = ledger.read_text()
    assert content.startswith(f"# Memory ledger {ledger.stem}\n")
    assert "\n- Alice is allergic to peanuts <!-- memory {" in content
    assert '"key":"user.allergy"' in content


def test_a_hand_edited_ledger_is_seen_by_the_next_retrieve(files_memory):
    files_memory.record(ALICE, [Fact("Alice drinks green tea every morning")])
    assert files_memory.retrieve(ALICE, "tea", 5)  # index built and cached
    [ledger] = _ledgers(files_memory)
    text = ledger.read_text().replace("green tea", "black coffee")
    text += "- Alice keeps bees on her balcony\n"
    ledger.write_text(text)
    _touch_later(ledger)
    got = [r.fact.text for r in files_memory.retrieve(ALICE, "coffee bees tea", 5, mode="bm25")]
    assert sorted(got) == [
        "Alice drinks black coffee every morning",
        "Alice keeps bees on her balcony",
    ]
    hand_written = files_memory.retrieve(ALICE, "bees", 1, mode="bm25")[0].fact
    assert hand_written.kind == "fact" and hand_written.created_at is not None


def test_memory_md_facts_are_recalled(files_memory):
    paths = files_memory.paths(ALICE)
    paths.root.mkdir(parents=True)
    paths.memory_md.write_text(
        "# Alice\n\nSome prose that is not a fact.\n\n## Health\n- Alice is allergic to peanuts\n"
    )
    got = files_memory.retrieve(ALICE, "allergy peanuts", 3)
    assert [r.fact.text for r in got] == ["Alice is allergic to peanuts"]
    assert len(files_memory.list(ALICE).items) == 1


@pytest.mark.parametrize(
    "text",
    [
        "two\nlines",
        "closing --> the comment",
        '<!-- memory {"key":"forged"} --> injected',
        "back\\slash and \\n literal",
        "unicode line\u2028separator and \u0085 next-line",
        "tab\tand carriage\rreturn",
        "   - looks like a bullet",
    ],
)
def test_hostile_text_round_trips_through_the_ledger(files_memory, text):
    fid = files_memory.record(
        ALICE,
        [
            Fact(
                text,
                key="k-->\n<!--",
                tags=("a\nb", "-->"),
                source=Source("x-->", text="x\ny <!-- -->"),
            )
        ],
    )[0].id
    [ledger] = _ledgers(files_memory)
    lines = ledger.read_text().split("\n")
    assert sum(1 for line in lines if line.startswith("- ")) == 1  # still one bullet line
    files_memory.close()  # drop the cache: read back from the file
    stored = files_memory.get(ALICE, [fid])[0]
    assert stored.text == text.strip()
    assert stored.key == "k-->\n<!--"
    assert stored.tags == ("a\nb", "-->")
    assert stored.source == Source("x-->", text="x\ny <!-- -->")


def test_render_and_parse_are_inverse():
    fact = Fact("Likes <!-- tea --> a lot", key="drink", importance=8, tags=("x",))
    [line] = parse_fact_file(render_fact(fact), default_created_at=None)
    assert line.fact.text == fact.text and line.fact.key == "drink"
    assert line.fact.importance == 8 and line.fact.tags == ("x",)


def test_two_open_facts_with_one_key_resolve_to_the_newest(files_memory):
    """As after a crash between the append and the supersession rewrite."""
    paths = files_memory.paths(ALICE)
    paths.ledger_dir.mkdir(parents=True)
    (paths.ledger_dir / "2026-01-01.md").write_text(
        '- Lives in Paris <!-- memory {"key":"city","importance":10,'
        '"created_at":"2026-01-01T10:00:00+00:00"} -->\n'
    )
    (paths.ledger_dir / "2026-02-01.md").write_text(
        '- Lives in Rome <!-- memory {"key":"city","importance":10,'
        '"created_at":"2026-02-01T10:00:00+00:00"} -->\n'
    )
    assert [f.text for f in files_memory.list(ALICE).items] == ["Lives in Rome"]
    assert [r.fact.text for r in files_memory.retrieve(ALICE, "where does she live", 5)] == [
        "Lives in Rome"
    ]


def test_index_is_reused_until_files_change(files_memory, embedder):
    files_memory.record(ALICE, [Fact(f"Alice fact {i} about gardening") for i in range(20)])
    files_memory.retrieve(ALICE, "gardening", 5)
    first = files_memory._index(ALICE)
    files_memory.retrieve(ALICE, "gardening tools", 5)
    assert files_memory._index(ALICE) is first
    time.sleep(0.01)
    files_memory.record(ALICE, [Fact("Alice bought a new spade")])
    assert files_memory._index(ALICE) is not first


def test_deleting_a_fact_keeps_the_rest_of_the_ledger_intact(files_memory):
    ids = [r.id for r in files_memory.record(ALICE, [Fact("one"), Fact("two"), Fact("three")])]
    [ledger] = _ledgers(files_memory)
    with ledger.open("a") as handle:
        handle.write("A note a person wrote by hand.\n")
    assert files_memory.delete(ALICE, [ids[1]]) == 1
    content = ledger.read_text()
    assert "- one " in content and "- three " in content and "- two " not in content
    assert "A note a person wrote by hand." in content


def test_vectors_are_cached_on_disk_and_forgotten_with_the_facts(tmp_path, embedder):
    from indexing.embeddings import CachedEmbedder
    from memory_service.longterm.files.vector_cache import cache_path

    first = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    ids = [r.id for r in first.record(ALICE, [Fact("Alice likes tea"), Fact("Alice rows")])]
    first.retrieve(ALICE, "tea", 2)
    cache = cache_path(first.paths(ALICE), embedder)
    assert cache.exists()
    first.close()

    counting = CachedEmbedder(embedder)  # a fresh process: nothing in memory
    restarted = FileSystemLongTermMemory(tmp_path / "ws", counting)
    assert restarted.retrieve(ALICE, "tea", 1, mode="dense")[0].fact.text == "Alice likes tea"
    assert counting.misses == 1  # only the query was embedded
    restarted.delete(ALICE, [ids[0]])
    assert not cache.exists()  # no vector of deleted text stays behind
    restarted.retrieve(ALICE, "rowing", 1)
    assert cache.exists()
    restarted.forget(ALICE)
    assert not cache.parent.exists()


def test_symlinked_ledgers_are_never_read(tmp_path, files_memory):
    bob = RuntimeContext("acme", "bob")
    files_memory.record(bob, [Fact("Bob's bank PIN is 9911")])
    [bob_ledger] = sorted(files_memory.paths(bob).ledger_dir.glob("*.md"))
    outside = tmp_path / "outside.md"
    outside.write_text("- Secret from outside the workspace\n")
    files_memory.record(ALICE, [Fact("Alice likes tea")])
    ledger_dir = files_memory.paths(ALICE).ledger_dir
    (ledger_dir / "2020-01-01.md").symlink_to(bob_ledger)
    (ledger_dir / "2020-01-02.md").symlink_to(outside)
    files_memory.paths(ALICE).memory_md.symlink_to(outside)
    _touch_later(ledger_dir / sorted(p.name for p in ledger_dir.glob("2026*.md"))[0])
    texts = [f.text for f in files_memory.list(ALICE, include_inactive=True).items]
    assert texts == ["Alice likes tea"]
    for mode in ("hybrid", "bm25", "dense"):
        got = files_memory.retrieve(ALICE, "bank PIN secret outside", 5, mode=mode)
        assert [r.fact.text for r in got] in ([], ["Alice likes tea"])


def test_recorded_vectors_are_kept_so_search_embeds_only_the_query(tmp_path, embedder):
    """Record embeds each fact once; the next search must not embed them again, with no
    in-memory cache holding them (one held every recorded fact: ~150 MB at 100k facts)."""
    from indexing.embeddings import CachedEmbedder

    counting = CachedEmbedder(embedder, max_entries=0)  # counts every text sent to the model
    memory = FileSystemLongTermMemory(tmp_path / "ws", counting)
    memory.record(ALICE, [Fact(f"Alice planted {n} tulips in spring") for n in range(5)])
    assert counting.misses == 5
    memory.record(ALICE, [Fact("Alice repaired the garden fence")])
    assert counting.misses == 6
    hits = memory.retrieve(ALICE, "fence repair", 1, mode="dense")
    assert hits[0].fact.text == "Alice repaired the garden fence"
    assert counting.misses == 7  # the query only
    memory.close()


def test_archived_ledgers_are_read_but_never_through_a_link(tmp_path, files_memory):
    bob = RuntimeContext("acme", "bob")
    files_memory.record(bob, [Fact("Bob's bank PIN is 9911")])
    bob_ledger_dir = files_memory.paths(bob).ledger_dir
    files_memory.record(ALICE, [Fact("Alice likes tea")])
    paths = files_memory.paths(ALICE)
    paths.archive_dir.mkdir()
    (paths.archive_dir / "2020-01-01.md").write_text("- Alice grew up in Lyon\n")
    (paths.archive_dir / "2020-01-02.md").symlink_to(next(bob_ledger_dir.glob("*.md")))
    (paths.archive_dir / "MEMORY.20200101T000000.md").write_text("- A snapshot, not a fact\n")
    assert sorted(f.text for f in files_memory.list(ALICE).items) == [
        "Alice grew up in Lyon",
        "Alice likes tea",
    ]
    for entry in paths.archive_dir.iterdir():
        entry.unlink()
    paths.archive_dir.rmdir()
    paths.archive_dir.symlink_to(bob_ledger_dir)  # a linked archive folder is not read
    assert [f.text for f in files_memory.list(ALICE).items] == ["Alice likes tea"]


def test_archiving_onto_an_archived_day_keeps_both_and_delete_reaches_the_archive(files_memory):
    from datetime import date

    paths = files_memory.paths(ALICE)
    paths.archive_dir.mkdir(parents=True)
    (paths.archive_dir / "2020-01-01.md").write_text("- Alice grew up in Lyon")  # no newline
    (paths.ledger_dir / "2020-01-01.md").write_text("- Alice moved to Turin\n")  # written since
    assert files_memory.archive_fact_files(ALICE, before=date(2021, 1, 1)) == 1
    assert not (paths.ledger_dir / "2020-01-01.md").exists()
    facts = {f.text: f.id for f in files_memory.list(ALICE).items}
    assert sorted(facts) == ["Alice grew up in Lyon", "Alice moved to Turin"]
    assert files_memory.delete(ALICE, [facts["Alice grew up in Lyon"]]) == 1
    assert (paths.archive_dir / "2020-01-01.md").read_text() == "- Alice moved to Turin\n"
    assert [f.text for f in files_memory.list(ALICE).items] == ["Alice moved to Turin"]
