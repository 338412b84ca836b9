"""Settings that do what the seeds say they do: each test drives the real services (files or
PostgreSQL, the real embedder, the openai SDK against the loopback server) through the setting
and checks what a user would notice."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import psycopg
import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.services import (
    build_harness,
    build_maintenance,
    build_scheduler,
    build_services,
)
from memory_service.stores.usage.files import FilesUsageStore
from tests.support.chat_script import Script
from tests.support.llm_server import text
from tests.support.postgres import PG_DSN

ALICE = RuntimeContext("acme", "alice")
PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."


@pytest.fixture
def build(tmp_path, embedder, monkeypatch):
    """``build(**settings)``: services over a fresh workspace, closed after the test."""
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    opened = []

    def make(**overrides):
        settings = load_settings(workspace=tmp_path / "ws", **overrides)
        services = build_services(settings, embedder=embedder)
        opened.append(services)
        return services

    yield make
    for services in opened:
        services.close()


def llm(server, **extra) -> dict:
    return {"base_url": server.base_url, "model": "chat-model", "context_window": 8192, **extra}


# -- disable_memory_hooks --------------------------------------------------------------------


@pytest.mark.parametrize("disabled", [False, True])
def test_disable_memory_hooks_stops_every_scheduled_pass(build, disabled):
    services = build(memory={"disable_memory_hooks": disabled})
    services.longterm.record(ALICE, [Fact(text="The user is allergic to peanuts.")])
    services.longterm.record(ALICE, [Fact(text="The user is allergic to peanuts!")])
    paths = OwnerPaths.of(services.settings.workspace, ALICE)
    ledgers = {p: p.read_bytes() for p in paths.ledger_dir.glob("*.md")}
    scheduler = build_scheduler(services, build_maintenance(services))
    reports = scheduler.run_once()
    if disabled:  # no dedup, no MEMORY.md: the ledgers are as the writes left them
        assert reports == []
        assert not paths.memory_md.exists()
        assert {p: p.read_bytes() for p in paths.ledger_dir.glob("*.md")} == ledgers
        # an explicit run still maintains
        assert build_maintenance(services).run_user(ALICE, force=True).status == "ran"
    else:
        [report] = reports
        assert report.status == "ran" and report.counts["consolidated"] == 1
        assert paths.memory_md.exists()


# -- consolidation: max_tokens, the memory model, usage --------------------------------------


@pytest.mark.parametrize(
    ("memory_model", "expected"), [(None, "small-model"), ("consolidator", "consolidator")]
)
def test_consolidation_sends_max_tokens_to_the_memory_model_and_counts_usage(
    build, llm_server, memory_model, expected
):
    services = build(
        llm=llm(llm_server, memory_model="small-model"),
        memory={"consolidation_max_tokens": 321, "model": memory_model},
    )
    services.longterm.record(ALICE, [Fact(text="The user likes green tea.")])
    llm_server.push(text("# Memory\n\n- The user likes green tea.\n", prompt_tokens=40))
    report = build_maintenance(services).run_user(ALICE, force=True)
    assert report.consolidation is not None and report.consolidation.method == "llm"
    [request] = llm_server.chat_requests
    assert request.body["max_tokens"] == 321
    assert request.model == expected
    usage = FilesUsageStore(services.settings.workspace).report("acme")
    assert usage["tokens"]["consolidation"]["calls"] == 1
    assert usage["tokens"]["consolidation"]["prompt_tokens"] == 40


# -- prompt injection: the importance fallback -------------------------------------------------


def test_importance_fallback_keeps_a_floor_of_five(build):
    services = build(memory={"recall_by_relevance": 0, "recall_by_importance": 5})
    services.longterm.record(
        ALICE,
        [
            Fact(text="The user is allergic to peanuts.", importance=9),
            Fact(text="The user once saw a red bicycle.", importance=2),
            Fact(text="The user hummed a tune on Tuesday.", importance=4),
        ],
    )
    recalled = build_harness(services).recall(ALICE.with_session("s1"), "what should I cook?")
    assert [r.text for r in recalled] == ["The user is allergic to peanuts."]


def test_unused_relevance_slots_pass_to_the_importance_fallback(build):
    """Both relevance hits are already in MEMORY.md: their two slots go to importance."""
    services = build(memory={"recall_by_relevance": 2, "recall_by_importance": 1})
    shown = ["The user is allergic to peanuts.", "The user lives in Oslo with two cats."]
    others = [
        Fact(text="The user works night shifts as a nurse.", importance=8),
        Fact(text="The user is training for a marathon in May.", importance=7),
        Fact(text="The user has a daughter named Mia.", importance=6),
        Fact(text="The user once saw a red bicycle.", importance=2),
    ]
    services.longterm.record(ALICE, [Fact(text=t, importance=5) for t in shown] + others)
    memory_md = OwnerPaths.of(services.settings.workspace, ALICE).memory_md
    memory_md.write_text("# Memory\n\n" + "".join(f"- {t}\n" for t in shown))
    prompt = build_harness(services).system_prompt(
        ALICE.with_session("s1"), "peanuts allergy, Oslo cats"
    )
    assert {r.via for r in prompt.recalled} == {"importance"}
    assert [r.text for r in prompt.recalled] == [f.text for f in others[:3]]


# -- the recall threshold ----------------------------------------------------------------------

HOBBIES = [
    "The user plays the cello in a string quartet.",
    "The user grows tomatoes on the balcony.",
    "The user runs 10 km every Saturday morning.",
    "The user collects vintage fountain pens.",
    "The user is learning Portuguese for a trip to Lisbon.",
    "The user bakes sourdough bread on Sundays.",
    "The user watches Formula 1 races with their brother.",
    "The user keeps bees in the garden.",
]


def _recalled(services, message: str) -> list[tuple[str, str]]:
    services.longterm.record(ALICE, [Fact(text=t) for t in HOBBIES])  # importance 5 each
    return [(r.via, r.text) for r in build_harness(services).recall(ALICE, message)]


def test_a_message_about_nothing_remembered_injects_no_memory_by_relevance(build):
    recalled = _recalled(build(), "How do I convert a PDF to a Word document?")
    assert [via for via, _ in recalled] == ["importance"] * 5  # the fallback's own five


def test_a_message_about_a_memory_still_recalls_it_by_relevance(build):
    recalled = _recalled(build(), "Which instrument do I play in my quartet?")
    assert recalled[0] == ("relevance", "The user plays the cello in a string quartet.")


def test_the_lowest_recall_threshold_injects_the_top_six_whatever_the_message(build):
    services = build(memory={"recall_threshold": -1.0})
    recalled = _recalled(services, "How do I convert a PDF to a Word document?")
    assert [via for via, _ in recalled].count("relevance") == 6


@pytest.mark.parametrize("value", ["1.5", "-2", "high"])
def test_a_bad_recall_threshold_stops_the_start_naming_the_variable(monkeypatch, value):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    monkeypatch.setenv("MEMORY_MEMORY__RECALL_THRESHOLD", value)
    with pytest.raises(ConfigurationError, match="MEMORY_MEMORY__RECALL_THRESHOLD"):
        load_settings()


# -- the background offline flush ----------------------------------------------------------


def test_with_the_never_trigger_a_quiet_session_is_flushed_in_the_background(build, llm_server):
    services = build(
        llm=llm(llm_server),
        memory={"flush_trigger": "never", "idle_flush_minutes": 0.001},
    )
    script = Script(chat="Noted.").flush(text(PEANUTS))
    llm_server.responder = script
    ctx = ALICE.with_session("s1")
    build_harness(services).call(ctx, "I'm allergic to peanuts, by the way.")
    assert script.requests["flush"] == []  # the trigger says never
    scheduler = build_scheduler(services, build_maintenance(services))
    time.sleep(0.1)  # past the (tiny) idle time
    report = scheduler.sweep_once()
    assert report.idle is not None and report.idle.flushed == 1
    assert len(script.requests["flush"]) == 1
    recalled = services.longterm.retrieve(ALICE, "peanut allergy", 3)
    assert recalled and recalled[0].fact.text == "The user is allergic to peanuts."
    assert services.shortterm.load(ctx).unflushed() == []
    scheduler.sweep_once()  # nothing left to flush: the model is not asked again
    assert len(script.requests["flush"]) == 1


def test_a_failed_idle_flush_is_not_retried_every_sweep(build, llm_server):
    services = build(
        llm=llm(llm_server, max_retries=0),
        memory={"flush_trigger": "never", "idle_flush_minutes": 0.001, "flush_retries": 0},
    )
    script = Script(chat="Noted.").flush(text("not a bullet, not the magic word"))
    llm_server.responder = script
    ctx = ALICE.with_session("s1")
    build_harness(services).call(ctx, "I'm allergic to peanuts, by the way.")
    scheduler = build_scheduler(services, build_maintenance(services))
    time.sleep(0.1)
    assert scheduler.sweep_once().idle.failed == 1
    time.sleep(0.1)
    assert scheduler.sweep_once().idle.failed == 0
    assert len(script.requests["flush"]) == 1
    letters = OwnerPaths.of(services.settings.workspace, ALICE).root / "dead-letters"
    assert len((letters / "flush.jsonl").read_text().splitlines()) == 1


# -- the flush sees today's ledger -----------------------------------------------------------


def test_the_flush_prompt_shows_the_facts_recorded_today(build, llm_server, chat_model):
    services = build()
    services.longterm.record(ALICE, [Fact(text="The user is vegetarian.", key="user.diet")])
    flush = MemoryFlushManager(services.longterm, chat_model, services.settings.workspace)
    llm_server.push(text("- [preference|6|user.diet] The user is vegetarian."))
    ctx = ALICE.with_session("s1")
    state = services.shortterm.load(ctx)
    state.append(Msg.user("As I said, I don't eat meat."), Msg.assistant("Got it."))
    result = flush.flush(state, ctx, "manual")
    [request] = llm_server.chat_requests
    user_text = request.messages[-1]["content"]
    today = user_text.split('<today_ledger read_only="true">')[1].split("</today_ledger>")[0]
    assert "- The user is vegetarian." in today
    assert result.status == "no_reply" or result.facts_created == 0  # not written again


# -- usage of compaction through the sessions API ----------------------------------------------


def test_compaction_through_the_sessions_api_is_in_the_usage_ledger(build, llm_server):
    from tests.support.chat_script import SUMMARY_REPLY

    services = build(llm=llm(llm_server, memory_model="small"))
    llm_server.responder = Script(summary=SUMMARY_REPLY)
    key = "acme-key-0123456789abcdef"
    client = TestClient(create_app(services, ApiKeyRing({key: {"tenant": "acme"}})))
    headers = {"Authorization": f"Bearer {key}"}
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}"}
        for i in range(8)
    ]
    body = {"user_id": "alice", "messages": messages}
    assert client.post("/v1/sessions/s1/messages", json=body, headers=headers).status_code == 200
    reply = client.post(
        "/v1/sessions/s1/compact", json={"user_id": "alice", "keep_last": 2}, headers=headers
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["compaction"]["performed"] is True
    usage = client.get("/v1/usage", headers=headers).json()
    assert usage["tokens"]["compaction"]["calls"] == 1


# -- the short-term TTL ------------------------------------------------------------------------


@pytest.mark.postgres  # replica state is in PostgreSQL with either session store
@pytest.mark.parametrize("backend", ["files", "postgres"])
def test_expired_session_states_are_purged_by_the_scheduler(build, backend):
    table = f"ttl_{uuid.uuid4().hex[:10]}"
    shortterm = {"backend": backend, "ttl_hours": 0.5 / 3600, "postgres_table": table}
    services = build(shortterm=shortterm, postgres={"dsn": PG_DSN})
    ctx = ALICE.with_session("s1")
    services.shortterm.append(ctx, [Msg.user("a secret plan")], compact=False)
    state_file = OwnerPaths.of(services.settings.workspace, ctx).state_file("s1")
    try:
        time.sleep(0.6)
        scheduler = build_scheduler(services, build_maintenance(services))
        assert scheduler.sweep_once().purged == 1
        if backend == "files":
            assert not state_file.exists()
        else:
            with psycopg.connect(PG_DSN) as conn:
                count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            assert count == 0
    finally:
        if backend == "postgres":
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {table}")


def test_a_session_past_its_ttl_is_flushed_into_long_term_memory_then_purged(build, llm_server):
    services = build(llm=llm(llm_server), shortterm={"ttl_hours": 0.3 / 3600})
    llm_server.responder = Script(chat="Noted.", flush=PEANUTS)
    ctx = ALICE.with_session("s1")
    services.shortterm.append(ctx, [Msg.user("I'm allergic to peanuts.")], compact=False)
    time.sleep(0.4)
    scheduler = build_scheduler(services, build_maintenance(services))
    assert scheduler.sweep_once().purged == 1
    assert not OwnerPaths.of(services.settings.workspace, ctx).state_file("s1").exists()
    [hit] = services.longterm.retrieve(ALICE, "peanut allergy", 1)
    assert hit.fact.text == "The user is allergic to peanuts." and hit.fact.session_id == "s1"


def test_a_session_whose_expiry_flush_fails_is_kept(build, llm_server):
    services = build(llm=llm(llm_server), shortterm={"ttl_hours": 0.3 / 3600})
    llm_server.responder = Script(chat="Noted.", flush="Sure, nothing to add.")  # malformed
    ctx = ALICE.with_session("s1")
    services.shortterm.append(ctx, [Msg.user("I'm allergic to peanuts.")], compact=False)
    time.sleep(0.4)
    scheduler = build_scheduler(services, build_maintenance(services))
    assert scheduler.sweep_once().purged == 0
    paths = OwnerPaths.of(services.settings.workspace, ctx)
    assert paths.state_file("s1").exists()
    assert "allergic to peanuts" in paths.dead_letters("flush").read_text()


def test_session_states_expire_after_a_day_by_default(build):
    assert build().shortterm.store.ttl == timedelta(hours=24)


# -- the long-term lifecycle ----------------------------------------------------------------

SISTER = "The user's sister is called Ines"
GYM = "The user's gym pass ran out this morning"


def _an_old_fact_and_an_expired_one(services) -> None:
    """A fact of the default importance (5) recorded 40 days ago, and one whose own
    ``expires_at`` has passed."""
    now = utcnow()
    services.longterm.record(
        ALICE,
        [
            Fact(text=SISTER, created_at=now - timedelta(days=40)),
            Fact(
                text=GYM, created_at=now - timedelta(days=40), expires_at=now - timedelta(hours=1)
            ),
        ],
    )


def _visible(services) -> tuple[list[str], list[str]]:
    hits = services.longterm.retrieve(ALICE, "the user's sister and gym pass", 5, -1.0)
    return [h.fact.text for h in hits], [f.text for f in services.longterm.list(ALICE).items]


@pytest.mark.parametrize("backend", ["files", "qdrant"])
def test_long_term_facts_are_kept_until_deleted_by_default(build, backend):
    services = build(longterm={"backend": backend})
    _an_old_fact_and_an_expired_one(services)
    assert _visible(services) == ([SISTER], [SISTER])  # the gym pass: its own expires_at
    report = build_maintenance(services).run_user(ALICE, force=True)
    assert report.status == "ran" and report.counts["expired"] == 1
    stored = services.longterm.list(ALICE, include_inactive=True).items
    assert [f.text for f in stored] == [SISTER]
    assert _visible(services) == ([SISTER], [SISTER])


@pytest.mark.parametrize("backend", ["files", "qdrant"])
def test_expiry_by_importance_is_a_setting(build, backend):
    services = build(longterm={"backend": backend, "expire_by_importance": True})
    _an_old_fact_and_an_expired_one(services)
    assert _visible(services) == ([], [])  # importance 5: 30 days
    report = build_maintenance(services).run_user(ALICE, force=True)
    assert report.status == "ran" and report.counts["expired"] == 2
    assert services.longterm.list(ALICE, include_inactive=True).items == []


def test_a_bad_expiry_setting_stops_the_start_naming_the_variable(monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    monkeypatch.setenv("MEMORY_LONGTERM__EXPIRE_BY_IMPORTANCE", "sometimes")
    with pytest.raises(ConfigurationError, match="MEMORY_LONGTERM__EXPIRE_BY_IMPORTANCE"):
        load_settings()


# -- flush before compaction, switchable ---------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_flush_before_compaction_can_be_switched_off(build, llm_server, enabled):
    compaction = {"trigger_messages": 4, "keep_last": 2, "flush_before_compaction": enabled}
    services = build(llm=llm(llm_server), compaction=compaction)
    script = Script().flush(text(PEANUTS))
    llm_server.responder = script
    ctx = ALICE.with_session("s1")
    messages = [Msg.user("I'm allergic to peanuts."), Msg.assistant("Noted.")] * 2
    result = services.shortterm.append(ctx, messages)
    assert result.compaction is not None and result.compaction.performed
    assert len(script.requests["flush"]) == (1 if enabled else 0)
    assert result.compaction.flushed is enabled


def test_the_compaction_of_a_context_overflow_is_in_the_usage_ledger(build, llm_server):
    from tests.support.llm_server import context_overflow

    services = build(llm=llm(llm_server))
    script = Script().chat(context_overflow(), text("Short enough now."))
    llm_server.responder = script
    ctx = ALICE.with_session("s1")
    services.shortterm.append(
        ctx, [Msg.user(f"question {i}") if i % 2 == 0 else Msg.assistant("ok") for i in range(8)]
    )
    outcome = build_harness(services).call(ctx, "and one more")
    assert outcome.overflow_retry and len(script.requests["summary"]) == 1
    usage = FilesUsageStore(services.settings.workspace).report("acme")
    assert usage["tokens"]["compaction"]["calls"] == 1
    assert outcome.usage["compaction"].total_tokens == 18
