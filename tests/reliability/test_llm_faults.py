"""LLM faults lose nothing: the loopback model times out, answers 500, 429, an empty or a
malformed reply during flush, compaction and consolidation, through the real API.

- flush: the watermark stays, the messages go to the dead-letter file, the next healthy flush
  sends them again and records their facts;
- compaction: the stored session is unchanged (messages, version, watermark); healthy, it
  compacts; a failed flush before a successful summary still leaves every summarised message
  in the dead letter and the session log;
- consolidation: MEMORY.md is byte for byte what it was, no snapshot taken; healthy, it is
  rewritten with the new facts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.paths import OwnerPaths
from memory_service.pipeline.consolidation import DEFAULT_CONSOLIDATION_PROMPT
from memory_service.services import build_services
from tests.support.chat_script import FLUSH_MARK, SUMMARY_MARK, SUMMARY_REPLY
from tests.support.llm_server import (
    RecordedRequest,
    Reply,
    delayed,
    malformed,
    rate_limited,
    server_error,
    text,
)

KEY = "acme-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
CONSOLIDATION_MARK = DEFAULT_CONSOLIDATION_PROMPT.splitlines()[0]
PEANUTS = "- [fact|9|user.allergy] The user is allergic to peanuts."
TIMEOUT_S = 0.5

FAULTS = {
    "timeout": lambda: delayed(TIMEOUT_S * 6, text(PEANUTS)),
    "500": server_error,
    "429": rate_limited,
    "empty": lambda: text(""),
    "malformed": malformed,
}
# A timeout waits out the client's deadline and its retry: seconds per test, so "slow".
FAULT_PARAMS = [
    pytest.param(name, marks=pytest.mark.slow) if name == "timeout" else name
    for name in sorted(FAULTS)
]


class FaultyModel:
    """The loopback model, by kind of request; ``faults[kind]`` makes that kind fail."""

    def __init__(self) -> None:
        self.faults: dict[str, Reply] = {}
        self.requests: dict[str, list[RecordedRequest]] = {}

    def __call__(self, request: RecordedRequest) -> Reply:
        system = next(
            (m.get("content") or "" for m in request.messages if m["role"] == "system"), ""
        )
        kind = "chat"
        for mark, name in (
            (FLUSH_MARK, "flush"),
            (SUMMARY_MARK, "summary"),
            (CONSOLIDATION_MARK, "consolidation"),
        ):
            if mark in system:
                kind = name
        self.requests.setdefault(kind, []).append(request)
        if kind in self.faults:
            return self.faults[kind]
        if kind == "flush":
            return text(PEANUTS)
        if kind == "summary":
            return text(SUMMARY_REPLY)
        if kind == "consolidation":  # MEMORY.md: every fact it was given, one bullet each
            given = request.messages[-1].get("content") or ""
            return text("\n".join(line for line in given.split("\n") if line.startswith("- ")))
        return text("OK.")


@pytest.fixture
def model(llm_server) -> FaultyModel:
    faulty = FaultyModel()
    llm_server.responder = faulty
    return faulty


@pytest.fixture
def api(tmp_path, embedder, monkeypatch, llm_server, model) -> Iterator[tuple]:
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(
        workspace=tmp_path / "ws",
        llm={
            "base_url": llm_server.base_url,
            "model": "m",
            "timeout_s": TIMEOUT_S,
            "max_retries": 1,
            "context_window": 16_000,
        },
    )
    services = build_services(settings, embedder=embedder)
    with TestClient(
        create_app(services, ApiKeyRing({KEY: {"tenant": "acme", "role": "admin"}}))
    ) as client:
        yield client, OwnerPaths(settings.workspace, "acme", "alice")
    services.close()


def session(client, sid: str = "s1") -> dict:
    got = client.get(f"/v1/sessions/{sid}", params={"user_id": "alice"}, headers=AUTH)
    assert got.status_code == 200, got.text
    return got.json()


def facts(client) -> list[str]:
    got = client.get("/v1/memories", params={"user_id": "alice"}, headers=AUTH)
    return [f["text"] for f in got.json()["items"]]


def dead_letters(paths: OwnerPaths) -> list[dict]:
    path = paths.dead_letters("flush")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def chat(client, message: str) -> dict:
    body = {"user_id": "alice", "session_id": "s1", "message": message}
    got = client.post("/v1/chat", json=body, headers=AUTH)
    assert got.status_code == 200, got.text
    return got.json()


# -- flush -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULT_PARAMS)
def test_a_failed_flush_keeps_the_conversation_and_the_next_one_catches_up(api, model, fault):
    client, paths = api
    model.faults["flush"] = FAULTS[fault]()

    first = chat(client, "Remember this: I am allergic to peanuts.")

    [flush] = first["memory"]["flushes"]
    assert flush["status"] == "failed" and flush["dead_letter"], flush
    state = session(client)
    assert state["last_flushed_index"] == -1  # the watermark did not move
    [letter] = dead_letters(paths)
    kept = [m["content"] for m in letter["messages"]]
    assert "Remember this: I am allergic to peanuts." in kept and "OK." in kept
    assert facts(client) == []

    del model.faults["flush"]  # the model is healthy again
    second = chat(client, "Also, I moved to Lisbon.")

    [flush] = second["memory"]["flushes"]
    assert flush["status"] == "flushed"
    assert "allergic to peanuts" in model.requests["flush"][-1].prompt_text  # caught up
    assert facts(client) == ["The user is allergic to peanuts."]
    state = session(client)
    assert state["last_flushed_index"] == max(m["seq"] for m in state["messages"])


# -- compaction ------------------------------------------------------------------------------


def _long_session(client, count: int = 32) -> None:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about peanuts"}
        for i in range(count)
    ]
    body = {"user_id": "alice", "messages": messages, "compact": False}
    got = client.post("/v1/sessions/s1/messages", json=body, headers=AUTH)
    assert got.status_code == 200, got.text


@pytest.mark.parametrize("fault", FAULT_PARAMS)
def test_a_failed_compaction_leaves_the_session_unchanged(api, model, fault):
    client, paths = api
    _long_session(client)
    before = session(client)
    model.faults["flush"] = model.faults["summary"] = FAULTS[fault]()

    failed = client.post("/v1/sessions/s1/compact", json={"user_id": "alice"}, headers=AUTH)

    assert 500 <= failed.status_code < 600 and failed.json()["error"]["code"].startswith("llm_")
    assert session(client) == before  # messages, version, watermark, summary: all as they were
    [letter] = dead_letters(paths)  # the flush before compacting failed: its messages are kept
    assert len(letter["messages"]) == 32

    model.faults.clear()
    done = client.post("/v1/sessions/s1/compact", json={"user_id": "alice"}, headers=AUTH)

    assert done.status_code == 200, done.text
    assert done.json()["compaction"]["performed"] and done.json()["compaction"]["flushed"]
    after = session(client)
    assert after["summary"] and after["message_count"] < 32 and after["version"] > before["version"]
    assert facts(client) == ["The user is allergic to peanuts."]


@pytest.mark.parametrize("fault", ["500", "malformed"])
def test_a_failed_compaction_while_appending_keeps_every_message(api, model, fault):
    client, _ = api
    model.faults["summary"] = FAULTS[fault]()
    for i in range(32):
        body = {"user_id": "alice", "messages": [{"role": "user", "content": f"m{i}"}]}
        got = client.post("/v1/sessions/s1/messages", json=body, headers=AUTH)
        assert got.status_code == 200, got.text  # appending never fails for the model's sake
    assert got.json()["compaction"]["performed"] is False
    assert got.json()["compaction"]["error"]["code"].startswith("llm_")
    assert [m["content"] for m in session(client)["messages"]] == [f"m{i}" for i in range(32)]

    model.faults.clear()
    body = {"user_id": "alice", "messages": [{"role": "user", "content": "m32"}]}
    healed = client.post("/v1/sessions/s1/messages", json=body, headers=AUTH)

    assert healed.json()["compaction"]["performed"] is True
    assert session(client)["summary"]


def test_a_failed_flush_before_a_good_summary_still_keeps_what_was_summarised(api, model):
    client, paths = api
    _long_session(client)
    model.faults["flush"] = server_error()

    done = client.post("/v1/sessions/s1/compact", json={"user_id": "alice"}, headers=AUTH)

    assert done.status_code == 200, done.text
    result = done.json()["compaction"]
    assert result["performed"] and not result["flushed"] and result["flush_error"]
    kept = {m["content"] for letter in dead_letters(paths) for m in letter["messages"]}
    removed = {f"message {i} about peanuts" for i in range(32)} - {
        m["content"] for m in session(client)["messages"]
    }
    assert removed and removed <= kept  # summarised away from the state, kept in the letter
    logged = paths.session_log("s1").read_text(encoding="utf-8")
    assert all(f"message {i} about peanuts" in logged for i in range(32))


# -- consolidation ---------------------------------------------------------------------------


def _maintain(client) -> dict:
    got = client.post("/v1/maintenance/run", json={"user_id": "alice", "force": True}, headers=AUTH)
    assert got.status_code == 200, got.text
    [report] = got.json()["reports"]
    return report


@pytest.mark.parametrize("fault", [*FAULT_PARAMS, "lossy"])
def test_a_failed_consolidation_leaves_memory_md_unchanged(api, model, fault):
    client, paths = api
    first = [{"text": f"The user owns {n} bicycles and likes route {n}"} for n in range(8)]
    client.post("/v1/memories", json={"user_id": "alice", "facts": first}, headers=AUTH)
    assert _maintain(client)["consolidation"]["written"]
    before = paths.memory_md.read_bytes()
    snapshots = sorted(paths.archive_dir.glob("MEMORY.*.md"))
    client.post(
        "/v1/memories",
        json={"user_id": "alice", "facts": [{"text": "The user moved to Lisbon in May"}]},
        headers=AUTH,
    )
    model.faults["consolidation"] = (
        text("- The user moved to Lisbon in May") if fault == "lossy" else FAULTS[fault]()
    )

    report = _maintain(client)

    assert report["status"] == "failed" or report["consolidation"]["refused"], report
    assert paths.memory_md.read_bytes() == before
    assert sorted(paths.archive_dir.glob("MEMORY.*.md")) == snapshots

    model.faults.clear()
    healed = _maintain(client)

    assert healed["status"] == "ran" and healed["consolidation"]["written"], healed
    rewritten = paths.memory_md.read_text(encoding="utf-8")
    assert "moved to Lisbon" in rewritten and "owns 7 bicycles" in rewritten
