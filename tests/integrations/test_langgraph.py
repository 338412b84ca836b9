"""The LangGraph store adapter: LangGraph's store behaviours (put/get/search/delete,
list_namespaces, filters, pages, TTL) on files and Qdrant Edge, in-process and over HTTP, and
a real graph whose LangMem memory tools record in one thread and recall in another."""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import sys
import time
from datetime import UTC, datetime

import numpy as np
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.store.base import BaseStore, InvalidNamespaceError, PutOp
from langmem import create_manage_memory_tool, create_search_memory_tool

from memory_service.client import errors as client_errors
from memory_service.client.sync_client import MemoryClient
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from tests.support.api import ACME_ADMIN_KEY

NS = ("memories", "alice")
ODD = {
    "text": 'Ünïcode ✓ and "quotes"\nnew line',
    "n": 3,
    "ratio": 0.25,
    "flag": True,
    "none": None,
    "list": [1, "two", {"three": [3.5, False]}],
    "nested": {"deep": {"er": "est"}},
}


def test_values_round_trip_exactly_and_items_carry_their_times(langgraph_stores):
    store = langgraph_stores()
    assert isinstance(store, BaseStore)
    assert store.get(NS, "k") is None
    before = time.time()
    store.put(NS, "k", ODD)
    item = store.get(NS, "k")
    assert (item.namespace, item.key, item.value) == (NS, "k", ODD)
    assert before - 1 <= item.created_at.timestamp() <= item.updated_at.timestamp()
    store.put(NS, "same", dict(ODD))  # an equal value under another key is another item
    store.put(("memories", "alice", "deeper"), "k", dict(ODD))
    assert store.get(NS, "same").value == ODD
    assert store.get(NS, "k").value == ODD


def test_put_again_replaces_the_value_and_delete_removes_it(langgraph_stores):
    store = langgraph_stores()
    store.put(NS, "city", {"text": "Alice lives in Lyon"})
    first = store.get(NS, "city")
    store.put(NS, "city", {"text": "Alice lives in Paris"})
    second = store.get(NS, "city")
    assert second.value == {"text": "Alice lives in Paris"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert [i.value for i in store.search(NS)] == [{"text": "Alice lives in Paris"}]
    store.delete(NS, "city")
    assert store.get(NS, "city") is None and store.search(NS) == []
    store.delete(NS, "city")  # nothing there: nothing to do
    store.put(NS, "city", {"text": "Alice lives in Lyon"})  # the old value again
    assert store.get(NS, "city").value == {"text": "Alice lives in Lyon"}


def test_search_reads_a_prefix_of_one_users_namespaces(langgraph_stores):
    store = langgraph_stores()
    store.put(("memories", "alice"), "a", {"text": "one"})
    store.put(("memories", "alice", "work"), "b", {"text": "two"})
    store.put(("memories", "alice", "work", "old"), "c", {"text": "three"})
    store.put(("notes", "alice"), "d", {"text": "four"})
    store.put(("memories", "bob"), "e", {"text": "five"})
    keys = lambda prefix, **kw: sorted(i.key for i in store.search(prefix, **kw))  # noqa: E731
    assert keys(("memories", "alice")) == ["a", "b", "c"]
    assert keys(("memories", "alice", "work")) == ["b", "c"]
    assert keys(("memories", "alice", "work", "old")) == ["c"]
    assert keys(("notes", "alice")) == ["d"]
    assert keys(("memories", "bob")) == ["e"]
    assert keys(("memories", "carol")) == []
    assert keys(("memories", "alice", "work"), query="one") == ["b", "c"]  # not a, nor d
    work = store.search(("memories", "alice", "work", "old"))[0]
    assert work.namespace == ("memories", "alice", "work", "old") and work.score is None


def test_tenants_never_see_each_others_items(langgraph_stores):
    acme, globex = langgraph_stores("acme"), langgraph_stores("globex")
    acme.put(NS, "k", {"text": "Alice likes tea"})
    assert globex.get(NS, "k") is None
    assert globex.search(NS) == [] and globex.search(NS, query="tea") == []
    globex.delete(NS, "k")
    assert acme.get(NS, "k").value == {"text": "Alice likes tea"}


def test_filters_use_langgraphs_operators(langgraph_stores):
    store = langgraph_stores()
    for i, colour in enumerate(["red", "blue", "red", "green"]):
        store.put(NS, f"k{i}", {"colour": colour, "score": i * 1.5, "meta": {"tier": i % 2}})
    keys = lambda flt: sorted(i.key for i in store.search(NS, filter=flt))  # noqa: E731
    assert keys({"colour": "red"}) == ["k0", "k2"]
    assert keys({"colour": {"$eq": "blue"}}) == ["k1"]
    assert keys({"colour": {"$ne": "red"}}) == ["k1", "k3"]
    assert keys({"score": {"$gt": 1.5}}) == ["k2", "k3"]
    assert keys({"score": {"$gte": 1.5}}) == ["k1", "k2", "k3"]
    assert keys({"score": {"$lt": 1.5}}) == ["k0"]
    assert keys({"score": {"$lte": 3.0, "$gt": 0}}) == ["k1", "k2"]
    assert keys({"meta": {"tier": 1}}) == ["k1", "k3"]
    assert keys({"colour": "red", "score": {"$gt": 0}}) == ["k2"]
    assert keys({"missing": 1}) == []
    ranked = store.search(NS, query="red", filter={"colour": "red"})
    assert sorted(i.key for i in ranked) == ["k0", "k2"]
    with pytest.raises(InvalidInputError, match=r"\$regex"):
        store.search(NS, filter={"colour": {"$regex": "r.*"}})


def test_limit_and_offset_page_newest_first(langgraph_stores):
    store = langgraph_stores()
    for i in range(5):
        store.put(NS, f"k{i}", {"n": i})
    assert [i.key for i in store.search(NS, limit=2)] == ["k4", "k3"]
    assert [i.key for i in store.search(NS, limit=2, offset=2)] == ["k2", "k1"]
    assert [i.key for i in store.search(NS, limit=10, offset=4)] == ["k0"]
    assert store.search(NS, offset=9) == []


def test_a_query_is_the_hybrid_recall_with_its_score(langgraph_stores):
    store = langgraph_stores()
    store.put(NS, "city", {"text": "Alice moved to Lisbon last spring"})
    store.put(NS, "pet", {"text": "Alice has a cat named Miso"})
    store.put(NS, "food", {"text": "Alice is vegetarian and loves curry"})
    store.put(NS, "secret", {"text": "Alice's cat Miso hates baths"}, index=False)
    found = store.search(NS, query="what is the name of her cat?")
    assert found[0].key == "pet"
    scored = [i for i in found if i.score is not None]
    assert found[0].score == max(i.score for i in scored)  # the dense cosine: 1 at most
    assert all(math.isfinite(i.score) and -1.0 <= i.score <= 1.0 for i in scored)
    # never scored, even on its own words: it follows the scored items
    assert [(i.key, i.score) for i in found if i.key == "secret"] == [("secret", None)]
    assert found[-1].key == "secret"
    assert [i.key for i in store.search(NS, query="cat", limit=1, offset=0)] == ["pet"]
    titled = ("memories", "alice", "docs")
    store.put(titled, "d1", {"title": "Sourdough baking", "body": "x" * 10}, index=["title"])
    assert store.search(titled, query="bread baking")[0].key == "d1"


# -- what LangGraph's own store suites ask (each test named after the one it mirrors) --------


def test_vector_update_with_embedding(langgraph_stores):
    store = langgraph_stores(user_at=0)
    ns = ("test",)
    store.put(ns, "doc1", {"text": "zany zebra Xerxes"})
    store.put(ns, "doc2", {"text": "something about dogs"})
    store.put(ns, "doc3", {"text": "text about birds"})
    (initial,) = [i for i in store.search(ns, query="Zany Xerxes") if i.key == "doc1"]
    store.put(ns, "doc1", {"text": "new text about dogs"})
    (after,) = [i for i in store.search(ns, query="Zany Xerxes") if i.key == "doc1"]
    assert after.score < initial.score
    # never searched: its words, exactly the query's, take no place among three indexed items
    store.put(ns, "doc4", {"text": "new text about dogs"}, index=False)
    found = store.search(ns, query="new text about dogs", limit=3)
    assert sorted(i.key for i in found) == ["doc1", "doc2", "doc3"]
    assert all(i.score is not None for i in found)
    assert [i.key for i in store.search(ns, query="new text about dogs", offset=3)] == ["doc4"]


def test_scores(langgraph_stores, embedder):
    """A hit's score is the cosine of the query and the fields indexed, whatever the fusion
    weighed; the order stays the fusion's."""
    store = langgraph_stores(user_at=0, fields=["key0"])
    store.put(("test",), "doc", {"key0": "aaa", "other": "bbb"}, index=["key0", "key1"])
    query_vec, doc_vec = embedder.embed(["poisson", "aaa"])
    (hit,) = store.search((), query="poisson")
    assert hit.score == pytest.approx(float(np.dot(query_vec, doc_vec)), abs=1e-3)
    assert -1.0 <= hit.score <= 1.0
    store.put(("test",), "two", {"key0": "a cat named Miso"})
    store.put(("test",), "three", {"key0": "Lisbon in spring"})
    found = store.search(("test",), query="my cat Miso")
    assert found[0].key == "two" and found[0].score > 0.5 > max(i.score for i in found[1:])


class LetterCounts:
    """A caller's embedding, as LangGraph's suites bring one: a text's characters counted in
    26 buckets (by code point), so the test knows every score exactly and spacing counts;
    ``calls`` counts the texts it embedded."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls += len(texts)
        out = []
        for text in texts:
            counts = [0.5] * 26
            for ch in text.lower():
                counts[ord(ch) % 26] += 1.0
            out.append(counts)
        return out


def _similarity(distance: str, a: list[float], b: list[float]) -> float:
    if distance == "l2":
        return -float(np.linalg.norm(np.subtract(a, b)))
    dot = float(np.dot(a, b))
    return (
        dot if distance == "inner_product" else dot / float(np.linalg.norm(a) * np.linalg.norm(b))
    )


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_scores_in_the_embedding_the_index_config_names(langgraph_stores, distance):
    """With LangGraph's ``index`` config, a hit's score is that embedding's similarity (by
    its ``distance_type``) of the query and the item's best indexed text, as PostgresStore
    gives it; the config's ``fields`` are what is searched."""
    embed = LetterCounts()
    index = {"dims": 26, "embed": embed, "distance_type": distance, "fields": ["key0"]}
    store = langgraph_stores(user_at=0, index=index)
    store.put(("test",), "doc", {"key0": "aaa", "other": "zebra"}, index=["key0", "key1"])
    (hit,) = store.search((), query="banana")
    want = _similarity(distance, *embed(["banana", "aaa"]))
    assert hit.score == pytest.approx(want, abs=1e-6)

    store.put(("test",), "two", {"key0": "quiz", "key9": "aaa"})  # only key0 is searched
    found = {i.key: i.score for i in store.search(("test",), query="quiz")}
    assert found["two"] == pytest.approx(_similarity(distance, *embed(["quiz", "quiz"])), abs=1e-6)
    assert found["doc"] == pytest.approx(_similarity(distance, *embed(["quiz", "aaa"])), abs=1e-6)


def test_caller_scores_take_the_best_of_an_items_fields_and_embed_each_text_once(
    langgraph_stores,
):
    embed = LetterCounts()
    store = langgraph_stores(user_at=0, index={"dims": 26, "embed": embed})
    store.put(("test",), "doc", {"a": "xxx", "b": "mmm"}, index=["a", "b"])
    for query, field in (("xxx", "xxx"), ("mmm", "mmm")):
        (hit,) = store.search(("test",), query=query)
        assert hit.score == pytest.approx(_similarity("cosine", *embed([query, field])), abs=1e-6)
    embed.calls = 0
    store.search(("test",), query="xxx")
    assert embed.calls == 0  # the query and both fields were embedded before: cached


def test_an_async_embedding_function_scores_async_searches(langgraph_stores):
    sync_embed = LetterCounts()

    async def embed(texts: list[str]) -> list[list[float]]:
        return sync_embed(texts)

    store = langgraph_stores(user_at=0, index={"dims": 26, "embed": embed, "fields": ["t"]})

    async def go():
        await store.aput(("test",), "doc", {"t": "abc"})
        return await store.asearch(("test",), query="cab")

    (hit,) = asyncio.run(go())
    assert hit.score == pytest.approx(1.0, abs=1e-6)  # the same letters, the same vector


def test_sqlite_index_config_names_its_fields_text_fields(langgraph_stores):
    """SqliteStore's config says ``text_fields`` where PostgresStore's says ``fields``."""
    embed = LetterCounts()
    store = langgraph_stores(user_at=0, index={"dims": 26, "embed": embed, "text_fields": ["k1"]})
    store.put(("test",), "doc", {"k1": "xxx", "k2": "yyy"})
    (hit,) = store.search(("test",), query="xxx")
    assert hit.score == pytest.approx(1.0, abs=1e-6)


def test_the_whole_value_is_the_json_langgraph_embeds(langgraph_stores):
    """``$`` is the value as LangGraph's stores write it (keys sorted, text unescaped), so a
    query of that very JSON scores 1.0 in the caller's embedding, as in PostgresStore."""
    embed = LetterCounts()
    store = langgraph_stores(user_at=0, index={"dims": 26, "embed": embed})
    value = {"text": "héllo world", "b": 1}
    store.put(("test",), "a", value)
    query = json.dumps(value, sort_keys=True, ensure_ascii=False)
    (hit,) = store.search(("test",), query=query)
    assert hit.score == pytest.approx(1.0, abs=1e-6)


def test_an_unknown_distance_type_is_refused(langgraph_stores):
    with pytest.raises(ValueError, match="distance_type"):
        langgraph_stores(index={"dims": 26, "embed": LetterCounts(), "distance_type": "hamming"})


def test_embed_with_path_operation_config(langgraph_stores):
    """Only the fields ``index`` names are searched, by either leg: a word found only in
    another field of the value finds nothing there."""
    store = langgraph_stores()
    ns = ("memories", "alice", "docs")
    store.put(ns, "bread", {"title": "Sourdough baking", "body": "chromodynamics"}, index=["title"])
    store.put(ns, "physics", {"title": "Quarks and gluons", "body": "bread"}, index=["title"])
    assert store.search(ns, query="chromodynamics")[0].key == "physics"
    assert store.search(ns, query="bread loaf")[0].key == "bread"
    assert store.get(ns, "bread").value == {"title": "Sourdough baking", "body": "chromodynamics"}


def test_embed_with_path(langgraph_stores, embedder):
    """Each indexed field is embedded alone and an item scores its best field's cosine: two
    items that match the query in one field each tie, whatever their other fields; a field
    left out of ``fields`` scores below. A put with fewer fields, or a delete, leaves no
    field of the old value behind, and no field shows as an item of its own."""
    store = langgraph_stores(user_at=0, fields=["key0", "key1", "key3"])
    ns = ("test",)
    store.put(ns, "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
    store.put(ns, "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    query, text = embedder.embed_query(["xxx"])[0], embedder.embed(["xxx"])[0]
    itself = float(np.dot(query, text))  # a field equal to the query: its best cosine
    first, second = store.search(ns, query="xxx")
    assert {first.key, second.key} == {"doc1", "doc2"}
    assert first.score == pytest.approx(itself, abs=1e-3)
    assert second.score == pytest.approx(itself, abs=1e-3)
    found = store.search(ns, query="uuu")
    assert [i.key for i in found] == ["doc2", "doc1"]
    assert found[0].score == pytest.approx(itself, abs=1e-3) and found[1].score < itself - 0.1
    assert all(i.score < itself - 0.1 for i in store.search(ns, query="www"))  # not indexed
    assert sorted(i.key for i in store.search(ns)) == ["doc1", "doc2"]
    assert store.list_namespaces() == [ns]

    store.put(ns, "doc2", {"key0": "uuu"})  # its "xxx" field is gone with the old value
    (doc2,) = [i for i in store.search(ns, query="xxx") if i.key == "doc2"]
    assert doc2.score < itself - 0.1
    store.delete(ns, "doc1")
    ctx = RuntimeContext(tenant_id="acme", user_id="test")
    left = langgraph_stores.services.longterm.list(ctx, limit=100, include_inactive=True).items
    assert {f.key for f in left} == {'langgraph:["doc2"]'}  # no field fact of either


def test_embed_with_path_fields_expire_with_their_item(langgraph_stores):
    """An item's further fields carry its ttl, and a read that refreshes it moves theirs."""
    store = langgraph_stores(user_at=0)
    ns = ("test",)
    store.put(ns, "t", {"a": "first field", "b": "second field"}, index=["a", "b"], ttl=10)
    ctx = RuntimeContext(tenant_id="acme", user_id="test")

    def expiries() -> dict[str, object]:
        page = langgraph_stores.services.longterm.list(ctx, limit=100)
        return {f.key: f.expires_at for f in page.items}

    set_at = expiries()
    assert len(set_at) == 2 and None not in set_at.values()
    time.sleep(0.01)
    assert store.get(ns, "t").value == {"a": "first field", "b": "second field"}
    moved = expiries()
    assert moved.keys() == set_at.keys() and all(moved[k] > set_at[k] for k in set_at)
    assert [i.key for i in store.search(ns, query="second field")] == ["t"]


def test_search_empty_prefix_is_unconstrained(langgraph_stores):
    store = langgraph_stores(user_at=0)
    for namespace in [("a",), ("b", "c"), ("d", "e", "f")]:
        store.put(namespace, "k", {"v": f"value of {namespace[-1]}"})
    assert {i.namespace for i in store.search((), limit=100)} == {
        ("a",),
        ("b", "c"),
        ("d", "e", "f"),
    }
    assert {i.namespace for i in store.search((), query="value of f")} == {
        ("a",), ("b", "c"), ("d", "e", "f"),
    }  # fmt: skip
    mem = langgraph_stores()  # the user second: a prefix of the first label reads every user
    mem.put(("memories", "alice"), "k", {"text": "Alice likes tea"})
    mem.put(("memories", "bob"), "k", {"text": "Bob likes coffee"})
    mem.put(("notes", "bob"), "k", {"text": "Bob's notes"})
    found = mem.search(("memories",), query="who likes coffee?")
    assert [i.namespace for i in found] == [("memories", "bob"), ("memories", "alice")]
    assert found[0].score > found[1].score
    assert {i.namespace for i in mem.search(())} >= {("memories", "alice"), ("notes", "bob")}
    assert langgraph_stores("globex").search(()) == []  # never another tenant's


def test_search_empty_prefix_reads_only_what_a_personal_key_may(tmp_path, embedder, monkeypatch):
    from fastapi.testclient import TestClient

    from memory_service.api import create_app
    from memory_service.api.keys import ApiKeyRing
    from memory_service.config import load_settings
    from memory_service.integrations.langgraph import MemoryServiceStore
    from memory_service.services import build_services

    app_key, alice_key = "acme-app-0123456789abcdef", "acme-alice-0123456789abcdef"
    keys = {
        app_key: {"tenant": "acme", "role": "application"},
        alice_key: {"tenant": "acme", "role": "personal", "user": "alice"},
    }
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    with TestClient(create_app(services, ApiKeyRing(keys))) as http:
        app = MemoryServiceStore.over_http(
            MemoryClient("http://testserver", app_key, http_client=http)
        )
        mine = MemoryServiceStore.over_http(
            MemoryClient("http://testserver", alice_key, http_client=http)
        )
        app.put(("memories", "alice"), "k", {"text": "Alice likes tea"})
        app.put(("memories", "bob"), "k", {"text": "Bob likes tea"})
        assert {i.namespace for i in app.search((), query="tea")} == {
            ("memories", "alice"), ("memories", "bob"),
        }  # fmt: skip
        assert [i.namespace for i in mine.search((), query="tea")] == [("memories", "alice")]
        assert [i.namespace for i in mine.search(("memories",))] == [("memories", "alice")]
        with pytest.raises(client_errors.PermissionDeniedError):
            mine.search(("memories", "bob"))
    services.close()


@pytest.mark.parametrize("label", ["a%b", "star*", "user_1", "q?m", "br[ack]et", "has space"])
def test_search_namespace_wildcard_chars_are_literal(langgraph_stores, label):
    store = langgraph_stores(user_at=0)
    decoy = label.replace("%", "xx").replace("*", "X").replace("_", "X").replace("?", "X")
    for namespace in [(label,), (label, "child"), (decoy + "Z",), ("userX1",)]:
        store.put(namespace, "k", {"v": "one"})
    assert store.get((label,), "k").value == {"v": "one"}
    found = {i.namespace for i in store.search((label,), limit=100)}
    assert found == {(label,), (label, "child")}
    assert {i.namespace for i in store.search((label,), query="one")} == found


def test_list_namespaces_metacharacter_labels(langgraph_stores):
    store = langgraph_stores(user_at=0)
    pairs = [("star*", "starX"), ("q?m", "qXm"), ("user_1", "userX1"), ("a%b", "axxb")]
    for label, decoy in pairs:
        store.put((label,), "k", {"v": 1})
        store.put((decoy,), "k", {"v": 1})
        store.put((label, "child"), "k", {"v": 1})
    for label, _ in pairs:
        assert store.list_namespaces(prefix=(label,)) == [(label,), (label, "child")]
        assert store.list_namespaces(prefix=(label, "child")) == [(label, "child")]
    assert ("a%b", "child") in store.list_namespaces(suffix=("child",))


def test_filter_keys_with_hyphens_and_digits(langgraph_stores):
    store = langgraph_stores()
    store.put(NS, "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(NS, "digit", {"123abc": "ok", "user": {"123abc": "ok2"}, "a.b": "literal"})
    keys = lambda flt: [i.key for i in store.search(NS, filter=flt)]  # noqa: E731
    assert keys({"access-level": "public"}) == ["hyphen"]
    assert keys({"user.access-level": "nested"}) == ["hyphen"]
    assert keys({"user.123abc": {"$eq": "ok2"}}) == ["digit"]
    assert keys({"a.b": "literal"}) == ["digit"]  # a field of that very name first
    assert keys({"user.access-level.deeper": "nested"}) == []


def _expiry(langgraph_stores, key: str):
    """The stored expiry of the item ``key`` of ``NS`` (what the adapter set from its ttl)."""
    ctx = RuntimeContext(tenant_id="acme", user_id="alice")
    page = langgraph_stores.services.longterm.list(ctx, limit=100)
    (fact,) = [f for f in page.items if f.key is not None and f.key.endswith(f'"{key}"]')]
    return fact.expires_at


def test_ttl_hides_an_item_and_refresh_ttl_keeps_it(langgraph_stores):
    store = langgraph_stores()
    store.put(NS, "short", {"text": "gone soon"}, ttl=2 / 60)  # 2 s: a loaded host's calls fit
    store.put(NS, "kept", {"text": "read often"}, ttl=10)
    store.put(NS, "forever", {"text": "no ttl"})
    assert store.get(NS, "short", refresh_ttl=False) is not None
    short_until = _expiry(langgraph_stores, "short")
    assert _expiry(langgraph_stores, "forever") is None
    set_at = _expiry(langgraph_stores, "kept")
    assert store.get(NS, "kept", refresh_ttl=False) is not None
    assert _expiry(langgraph_stores, "kept") == set_at  # read without a refresh: unmoved
    # past the stored expiry, however long the calls above took
    time.sleep(max(0.0, (short_until - datetime.now(UTC)).total_seconds()) + 0.05)
    assert store.get(NS, "short") is None  # and its read refreshed nothing
    assert store.get(NS, "kept") is not None
    assert _expiry(langgraph_stores, "kept") > set_at  # each read moves it on by the ttl
    assert sorted(i.key for i in store.search(NS)) == ["forever", "kept"]


def test_list_namespaces_matches_prefix_suffix_wildcards_and_depth(langgraph_stores):
    store = langgraph_stores()
    spaces = [
        ("a", "alice", "c"),
        ("a", "alice", "d", "e"),
        ("a", "alice", "d", "i"),
        ("a", "alice", "f"),
        ("a", "alice"),
        ("b", "alice", "f"),
    ]
    for i, ns in enumerate(spaces):
        store.put(ns, f"id{i}", {"data": i})
    mine = ("a", "alice")
    assert store.list_namespaces(prefix=mine) == sorted(spaces[:5])
    assert store.list_namespaces(prefix=mine, suffix=("f",)) == [("a", "alice", "f")]
    assert store.list_namespaces(prefix=("a", "alice", "*", "e")) == [("a", "alice", "d", "e")]
    assert store.list_namespaces(prefix=mine, max_depth=3) == [
        ("a", "alice"), ("a", "alice", "c"), ("a", "alice", "d"), ("a", "alice", "f"),
    ]  # fmt: skip
    assert store.list_namespaces(prefix=mine, limit=2) == sorted(spaces[:5])[:2]
    assert store.list_namespaces(prefix=mine, offset=3) == sorted(spaces[:5])[3:]
    assert store.list_namespaces(prefix=("a", "bob")) == []
    store.put(("a", "bob"), "x", {"data": 0})  # every user of the tenant, in-process or over HTTP
    assert store.list_namespaces(suffix=("f",)) == [("a", "alice", "f"), ("b", "alice", "f")]
    assert store.list_namespaces(max_depth=2) == [("a", "alice"), ("a", "bob"), ("b", "alice")]
    assert langgraph_stores("globex").list_namespaces() == []  # never another tenant's


@pytest.mark.parametrize(
    "namespace",
    [(), ("memories",), ("memories", "a.b"), ("x", "")],
)
def test_a_namespace_the_mapping_cannot_place_is_refused(langgraph_stores, namespace):
    store = langgraph_stores()
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"text": "x"})])
    assert store.list_namespaces(prefix=NS) == []


@pytest.mark.parametrize(
    "value", [{"when": object()}, {"x": float("nan")}, {1: "int key"}, {"big": "w " * 9000}]
)
def test_a_bad_value_writes_nothing_of_its_batch(langgraph_stores, value):
    store = langgraph_stores()
    with pytest.raises(InvalidInputError):
        store.batch([PutOp(NS, "good", {"text": "fine"}), PutOp(NS, "bad", value)])
    assert store.get(NS, "good") is None and store.search(NS) == []


def test_the_async_api_reads_what_it_wrote(langgraph_stores):
    store = langgraph_stores()

    async def scenario():
        await store.aput(NS, "k", {"text": "Alice plays the cello"})
        got = await store.aget(NS, "k")
        found = await store.asearch(NS, query="which instrument?")
        spaces = await store.alist_namespaces(prefix=NS)
        await store.adelete(NS, "k")
        return got, found, spaces, await store.aget(NS, "k")

    got, found, spaces, after = asyncio.run(scenario())
    assert got.value == {"text": "Alice plays the cello"}
    assert found[0].key == "k" and found[0].score is not None
    assert spaces == [NS] and after is None


def test_the_user_position_is_configurable(langgraph_stores):
    store = langgraph_stores(user_at=0)
    store.put(("alice", "prefs"), "k", {"text": "dark mode"})
    assert store.get(("alice", "prefs"), "k").value == {"text": "dark mode"}
    assert [i.key for i in store.search(("alice",))] == ["k"]
    facts = langgraph_stores.services.longterm.list(RuntimeContext("acme", "alice")).items
    assert [f.key for f in facts] == ['langgraph:["prefs","k"]']


def test_importing_without_langgraph_names_the_extra(monkeypatch):
    for name in [n for n in sys.modules if n == "langgraph" or n.startswith("langgraph.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if LangGraph were not installed
    monkeypatch.delitem(sys.modules, "memory_service.integrations.langgraph", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'memory-service\[langgraph\]'"):
        importlib.import_module("memory_service.integrations.langgraph")


# -- a real graph with LangMem's memory tools ------------------------------------------------


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model answering from a script; tools are bound by name only."""

    def bind_tools(self, tools, **kwargs):
        return self


def call(name: str, args: dict, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def test_a_graph_records_in_one_thread_recalls_in_another_and_erase_removes_it(
    langgraph_stores,
):
    store = langgraph_stores()
    namespace = ("memories", "{langgraph_user_id}")
    tools = [create_manage_memory_tool(namespace), create_search_memory_tool(namespace)]
    script = iter(
        [
            call("manage_memory", {"content": "Alice is allergic to peanuts"}, "c1"),
            AIMessage("Noted."),
            call("search_memory", {"query": "food allergies"}, "c2"),
            AIMessage("You are allergic to peanuts."),
            call("search_memory", {"query": "food allergies"}, "c3"),
            AIMessage("I know nothing about you."),
        ]
    )
    agent = create_agent(ScriptedChat(messages=script), tools, store=store)

    def turn(thread: str, text: str) -> list:
        config = {"configurable": {"thread_id": thread, "langgraph_user_id": "alice"}}
        return agent.invoke({"messages": [("user", text)]}, config)["messages"]

    turn("t1", "Remember that I am allergic to peanuts.")
    (memory,) = store.search(("memories", "alice"))
    assert memory.value == {"content": "Alice is allergic to peanuts"}

    recalled = turn("t2", "What am I allergic to?")
    tool_result = next(m for m in recalled if m.type == "tool")
    assert "allergic to peanuts" in tool_result.content

    admin = MemoryClient("http://testserver", ACME_ADMIN_KEY, http_client=langgraph_stores.http)
    admin.erase_user("alice")
    assert store.search(("memories", "alice")) == []
    after = turn("t3", "What am I allergic to?")
    assert "peanuts" not in next(m for m in after if m.type == "tool").content
