"""Sensitive data is redacted before it is stored, whichever way it comes in.

A Luhn-valid card number (and an IBAN, identity numbers, secrets) sent through the record API,
its PATCH, the CLI, an import, the flush's extracted facts, ``memory_save`` (the harness's
tool and the MCP server's), or a session message, is stored as ``[card]`` (and ``[iban]``,
``[national-id]``, ``[secret]``): read back through the API or the store, and found nowhere in
the bytes of the workspace, a Qdrant Edge folder or the PostgreSQL tables. ``refuse`` writes
nothing and says why (422 ``sensitive_data``; the CLI one error line); ``off`` stores what
was sent, which is also what shows the scans would see the digits.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import psycopg
import pytest
from mcp import Client
from stdnum import luhn
from stdnum.cn import ric

from benchmarks.privacy import faker_corpus
from benchmarks.privacy import redaction as bench
from memory_service.api.keys import Principal
from memory_service.cli import main
from memory_service.config import MemorySettings, Settings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source
from memory_service.domain.messages import Msg, ToolCall
from memory_service.domain.redaction import Redactor, SensitiveDataError, find, redact_text
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.services import build_services, build_shortterm
from memory_service.tools import MemoryTools
from tests.support.api import ACME_ADMIN_KEY, NDJSON, append, assert_error, auth, record, search
from tests.support.llm_server import text
from tests.support.postgres import PG_DSN

CARD = "4539 1488 0343 6467"  # Luhn-valid (a Visa's prefix and length)
DIGITS = CARD.replace(" ", "")
OTHER_CARD = "5425233430109903"
IBAN = "DE89 3704 0044 0532 0130 00"
RIC = "11010519491231002X"  # the Chinese resident identity number's own example
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
ALICE = RuntimeContext("acme", "alice", "s1")
SAID = f"My card is {CARD}, the one I use for groceries."


def test_the_cards_are_luhn_valid():
    assert luhn.is_valid(DIGITS) and luhn.is_valid(OTHER_CARD)


def holding(folder: Path, *needles: str) -> list[str]:
    """The files under ``folder`` whose bytes hold any of ``needles``."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and any(n.encode() in p.read_bytes() for n in needles)
    )


# -- the detector ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        (SAID, "My card is [card], the one I use for groceries."),
        (f"卡号：{DIGITS}。", "卡号：[card]。"),
        (f"pay with {CARD.replace(' ', '-')}", "pay with [card]"),
        (f"IBAN {IBAN} (BIC COBADEFFXXX)", "IBAN [iban] (BIC COBADEFFXXX)"),
        (f"我的身份证号是{RIC}，请登记。", "我的身份证号是[national-id]，请登记。"),
        ("My SSN is 536-90-4399.", "My SSN is [national-id]."),
        (f"deploy with {TOKEN} today", "deploy with [secret] today"),
        ("AWS key AKIAIOSFODNN7EXAMPLE in the env", "AWS key [secret] in the env"),
        ("wifi password: Tiger2024!, thanks", "wifi password: [secret], thanks"),
        ("我的密码是abc12345，别告诉别人", "我的密码是[secret]，别告诉别人"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY----- ok",
            "[secret] ok",
        ),
    ],
)
def test_each_kind_is_replaced_by_its_placeholder(said, stored):
    assert redact_text(said)[0] == stored


@pytest.mark.parametrize(
    "said",
    [
        "Order #20240615123456 shipped",
        "call +86 138 0013 8000 or 555-123-4567",
        "It cost $4,539.14 on 2024-06-15 at 09:30",
        f"not a card: {DIGITS[:-1]}{(int(DIGITS[-1]) + 1) % 10}",  # Luhn-invalid
        "fact 6f1b8d0e-2f53-5c1e-9a53-6d656d6f7279, commit 3f7a9c2e4b1d0a8f6e5c4b3a2f1e0d9c8b",
        "IMEI 356938035643809 and ISBN 978-3-16-148410-0",
        "I forgot my password again",
        "[card] [secret] [national-id]",  # what is stored is stored again unchanged
    ],
)
def test_lookalikes_are_kept(said):
    assert find(said) == []


# Born before the region code existed (320102, from 1983) or keeping a code abolished since
# (510202, Chongqing's district while it was in Sichuan): real numbers keep the code they were
# issued with, and python-stdnum's list of current divisions rejects both.
OLD_REGION_RICS = ["510202196005120011", "320102197503140027"]


@pytest.mark.parametrize("number", OLD_REGION_RICS)
def test_an_identity_number_is_known_by_its_structure_not_by_a_list_of_regions(number):
    assert redact_text(f"身份证号：{number}。") == ("身份证号：[national-id]。", {"national-id": 1})
    assert redact_text(f"ID {number[:6]} {number[6:14]} {number[14:]} on file")[0] == (
        "ID [national-id] on file"
    )


@pytest.mark.parametrize(
    "said",
    [
        "99010219750314002X",  # no province is numbered 99
        "110101197513400021",  # month 13
        "110101197503140029",  # wrong check digit
        f"110101{2090}0314002X",  # born in the future
    ],
)
def test_eighteen_digits_without_an_identity_numbers_structure_are_kept(said):
    assert [f.kind for f in find(said)] != ["national-id"]


@pytest.mark.parametrize(
    "card",
    [
        "675912345674",  # Maestro, 12 digits
        "2131 1993 5181 900",  # JCB's 15-digit range
        "180037167868433",  # JCB's other 15-digit range (UATP's 1)
        "3515 3776 0207 7640",  # JCB, printed in groups
        "2200 1234 5678 9019",  # Mir
    ],
)
def test_cards_of_every_networks_lengths_and_ranges_are_redacted(card):
    assert luhn.is_valid(card.replace(" ", ""))
    assert redact_text(f"Charge it to {card}, thanks.")[0] == "Charge it to [card], thanks."


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        ("export TOKEN=qXyTbRwLmZkPfVaHsDnE", "export TOKEN=[secret]"),
        (
            'DEPLOY_HOOK="9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c2b4d6f8e0a1c3e5b7d9f1a3c5e7b9d1f"',
            'DEPLOY_HOOK="[secret]"',
        ),
        ("set SESSION_SECRET=u7#Lq!9zR2@x", "set SESSION_SECRET=[secret]"),
        ('{"clientSecret": "Zm9vYmFyYmF6cXV4MTIzNDU2"}', '{"clientSecret": "[secret]"}'),
        (
            "my GitHub token is 8hG2kLq9ZpX4vN7wT1cR, keep it",
            "my GitHub token is [secret], keep it",
        ),
        ("mein Token lautet X9fK2mQ7pL4tW8zR3vN6.", "mein Token lautet [secret]."),
        ("我的令牌是 Q2w9Ez7Rt5Yu3Io1Pa8S 。", "我的令牌是 [secret] 。"),
        ("La clé API est ksmmQOFPVnruhhynCOQJwrJZ", "La clé API est [secret]"),
        ("my password is hunter2", "my password is [secret]"),
        ("パスワードはalktQuNlUeZloAgkYfmcck", "パスワードは[secret]"),
        ("--api-key 9f8e7d6c5b4a3210 --verbose", "--api-key [secret] --verbose"),
        (
            "curl -H 'Authorization: Bearer Zq8XmT4kWp2RbN7cY5' x",
            "curl -H 'Authorization: Bearer [secret]' x",
        ),
    ],
)
def test_a_random_value_assigned_to_a_secret_or_an_environment_name_is_redacted(said, stored):
    assert redact_text(said)[0] == stored


@pytest.mark.parametrize(
    "said",
    [
        "Order number 4539148803436467 has shipped.",  # Luhn-valid, a Visa's range
        "订单号：4539148803436467，已发货。",
        "Tracking number: 5425233430109903",
        "Bestellnummer 4539 1488 0343 6467 wurde storniert.",
        "export GIT_COMMIT=3f7a9c2e4b1d0a8f6e5c4b3a2f1e0d9c8b7a6f5e",  # an identifier's name
        "sort_key: created_at, primary_key = user_id",
        "the secret is unbelievable and the key is underneath",
        "export PATH=/usr/local/bin:/usr/bin",
        "REQUEST_ID=6f1b8d0e-2f53-4c1e-9a53-6d656d6f7279",
        "export NODE_OPTIONS=--max-old-space-size=4096 IMAGE=ghcr.io/org/app:1.2.3",
        "export HOME=/home/kimberly08",
        "session: 2024-06-15T10:00:00, token: null, api_key: ${API_KEY}",
        "The password is stored in the vault; my password is incorrect.",
        "SIM card 8986 0012 3456 7890 120",  # an ICCID passes Luhn too
        "request id 19c79d97-5084-4145-9692-69590f6d8f62",  # 5084-4145-9692: a Maestro's shape
    ],
)
def test_lookalikes_named_as_something_else_are_kept(said):
    assert find(said) == []


def test_refuse_names_the_field_and_kind_never_the_value():
    with pytest.raises(SensitiveDataError) as refused:
        Redactor("refuse").fact(Fact("The user's card", tags=(DIGITS,)))
    assert refused.value.code == "sensitive_data"
    assert "a tag" in refused.value.message and "card" in refused.value.message
    assert DIGITS not in refused.value.message


# -- the record API, PATCH, import ------------------------------------------------------------


def test_api_record_redacts_text_source_key_and_tags(api_client, tmp_path):
    fact = {
        "text": f"Alice pays groceries with card {CARD} and IBAN {IBAN}",
        "key": f"card-{DIGITS}",
        "tags": ["payment", DIGITS],
        "source": {"origin": "chat", "text": SAID},
    }
    response = api_client.post(
        "/v1/memories", json={"user_id": "alice", "facts": [fact]}, headers=auth()
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["redacted"] == {"card": 4, "iban": 1}
    assert body["results"][0]["redacted"] == {"card": 4, "iban": 1}
    fact_id = body["results"][0]["id"]

    stored = api_client.get(f"/v1/memories/{fact_id}?user_id=alice", headers=auth()).json()
    assert stored["text"] == "Alice pays groceries with card [card] and IBAN [iban]"
    assert stored["key"] == "card-[card]"
    assert stored["tags"] == ["payment", "[card]"]
    assert stored["source"]["text"] == "My card is [card], the one I use for groceries."
    hits = search(api_client, "alice", "which card pays for groceries").json()["hits"]
    assert [h["id"] for h in hits] == [fact_id]  # recalled by its other words
    assert holding(tmp_path, DIGITS, CARD, IBAN.replace(" ", "")) == []


def test_api_patch_redacts_a_card_in_a_tag(api_client, tmp_path):
    fact_id = record(api_client, "alice", "Alice likes tea").json()["results"][0]["id"]
    response = api_client.patch(
        f"/v1/memories/{fact_id}",
        json={"user_id": "alice", "tags": ["drinks", CARD]},
        headers=auth(),
    )
    assert response.status_code == 200, response.text
    assert response.json()["tags"] == ["drinks", "[card]"]
    assert holding(tmp_path, DIGITS, CARD) == []


def test_api_import_redacts_and_refuse_makes_it_a_bad_line(apps, tmp_path):
    line = json.dumps(
        {"tenant_id": "acme", "user_id": "alice", "text": f"Alice's card is {DIGITS}"}
    )
    _, client = apps("redact")
    answer = client.post("/v1/import", content=line, headers={**NDJSON, **auth(ACME_ADMIN_KEY)})
    assert answer.status_code == 200, answer.text
    listed = client.get("/v1/memories?user_id=alice", headers=auth()).json()["items"]
    assert [f["text"] for f in listed] == ["Alice's card is [card]"]
    assert holding(tmp_path / "redact", DIGITS) == []

    _, strict = apps("refuse", privacy={"redaction": "refuse"})
    refused = strict.post("/v1/import", content=line, headers={**NDJSON, **auth(ACME_ADMIN_KEY)})
    assert_error(refused, 422, "bad_lines")
    assert "payment card" in refused.json()["error"]["message"]
    assert holding(tmp_path / "refuse", DIGITS) == []


def test_an_imported_facts_phrasings_are_redacted_too(apps, tmp_path):
    said = {"text": f"Alice paid with {DIGITS}", "source": {"origin": "chat", "text": SAID}}
    line = json.dumps(
        {"tenant_id": "acme", "user_id": "alice", "text": "Alice pays by card", "phrasings": [said]}
    )
    _, client = apps("redact")
    answer = client.post("/v1/import", content=line, headers={**NDJSON, **auth(ACME_ADMIN_KEY)})
    assert answer.status_code == 200, answer.text
    [fact] = client.get("/v1/memories?user_id=alice", headers=auth()).json()["items"]
    assert fact["phrasings"][0]["text"] == "Alice paid with [card]"
    assert holding(tmp_path / "redact", DIGITS, CARD) == []


def test_refuse_writes_nothing_and_off_stores_as_sent(apps, tmp_path):
    _, strict = apps("refuse", privacy={"redaction": "refuse"})
    refused = record(strict, "alice", "Alice likes tea", SAID)
    assert_error(refused, 422, "sensitive_data")
    assert DIGITS not in refused.text and CARD not in refused.text
    assert strict.get("/v1/memories?user_id=alice", headers=auth()).json()["items"] == []
    assert_error(append(strict, "s1", [{"role": "user", "content": SAID}]), 422, "sensitive_data")
    assert holding(tmp_path / "refuse", DIGITS, CARD, "Alice likes tea") == []

    _, off = apps("off", privacy={"redaction": "off"})
    assert record(off, "alice", SAID).json()["redacted"] == {}
    assert holding(tmp_path / "off", CARD) != []  # the scan sees what is there


# -- sessions --------------------------------------------------------------------------------


def test_session_messages_are_redacted_in_the_state_log_and_tool_results(api_client, tmp_path):
    big_result = f"statement line: card {CARD}\n" + "x" * 40_000  # evicted to a file
    messages = [
        {"role": "user", "content": SAID},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "pay", "arguments": json.dumps({"card": DIGITS})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big_result},
    ]
    response = append(api_client, "s1", messages)
    assert response.status_code == 200, response.text
    assert response.json()["redacted"] == {"card": 3}
    state = api_client.get("/v1/sessions/s1?user_id=alice", headers=auth()).json()
    assert state["messages"][0]["content"] == "My card is [card], the one I use for groceries."
    found = api_client.post(
        "/v1/sessions/search", json={"user_id": "alice", "query": "groceries"}, headers=auth()
    ).json()
    assert found["hits"] and all(DIGITS not in json.dumps(h) for h in found["hits"])
    assert holding(tmp_path, DIGITS, CARD) == []


@pytest.mark.postgres
def test_session_messages_in_postgresql_hold_no_card(tmp_path, pg_schema, embedder):
    settings = Settings(
        workspace=tmp_path / "ws",
        shortterm={"backend": "postgres"},
        state={"backend": "postgres"},
        postgres={"dsn": PG_DSN, "schema_name": pg_schema},
    )
    services = build_services(settings, embedder=embedder)
    try:
        services.shortterm.append(ALICE, [Msg.user(SAID), Msg.assistant(f"Noted {CARD}")])
        stored = services.shortterm.get(ALICE).messages
        assert [m.content for m in stored] == [
            "My card is [card], the one I use for groceries.",
            "Noted [card]",
        ]
    finally:
        services.close()
    with psycopg.connect(PG_DSN) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (pg_schema,),
            )
        ]
        assert "session_log" in tables
        holding_rows = {
            t: conn.execute(
                f'SELECT count(*) FROM "{pg_schema}"."{t}" AS r WHERE r::text LIKE %s',
                (f"%{DIGITS[:8]}%",),
            ).fetchone()[0]
            for t in tables
        }
    assert holding_rows == dict.fromkeys(tables, 0)
    assert holding(tmp_path, DIGITS) == []


# -- the store itself, over every backend ------------------------------------------------------


def test_every_backend_stores_the_placeholder(memory, tmp_path, request):
    fact = Fact(SAID, tags=(DIGITS,), source=Source("chat", text=f"card {CARD} again"))
    result = memory.record(ALICE, [fact])[0]
    assert result.redacted == {"card": 3}
    stored = memory.get(ALICE, [result.id])[0]
    assert (stored.text, stored.tags, stored.source_text) == (
        "My card is [card], the one I use for groceries.",
        ("[card]",),
        "card [card] again",
    )
    assert [r.fact.id for r in memory.retrieve(ALICE, "groceries card")] == [result.id]
    memory.redactor = Redactor("off")  # a control: what the scan finds when nothing is redacted
    memory.record(ALICE, [Fact(f"control {OTHER_CARD}")])
    memory.close()  # Qdrant Edge: its segments and write-ahead log on disk
    assert holding(tmp_path, DIGITS, CARD) == []
    on_disk = request.node.callspec.params["memory"] != "qdrant-local"  # local mode: in memory
    assert bool(holding(tmp_path, OTHER_CARD)) == on_disk


# -- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_PRIVACY__REDACTION"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("_clean_env")
def test_cli_record_redacts_and_refuse_is_one_error_line(tmp_path, capsys, monkeypatch):
    ws = str(tmp_path / "ws")
    assert main(["record", "--workspace", ws, "--user", "alice", SAID]) == 0
    out = capsys.readouterr().out
    assert "My card is [card]" in out and "1 [card]" in out and DIGITS not in out
    assert main(["record", "--workspace", ws, "--user", "alice", "--json", SAID]) == 0
    assert json.loads(capsys.readouterr().out)[0]["redacted"] == {"card": 1}

    monkeypatch.setenv("MEMORY_PRIVACY__REDACTION", "refuse")
    strict = str(tmp_path / "strict")
    assert main(["record", "--workspace", strict, "--user", "alice", f"card {CARD}"]) != 0
    said = capsys.readouterr()
    assert said.out == ""
    assert len(said.err.strip().splitlines()) == 1 and "sensitive data" in said.err
    assert holding(tmp_path, DIGITS, CARD) == []


# -- the flush, memory_save, MCP -----------------------------------------------------------


def test_flush_extracted_facts_are_redacted(longterm, chat_model, workspace, script):
    script.flush(text(f"- [fact|8|user.card] The user's grocery card is {CARD}."))
    flush = MemoryFlushManager(longterm, chat_model, workspace, config=MemorySettings())
    state = AgentState(session_id="s1")
    state.append(Msg.user(SAID), Msg.assistant("Noted."))
    result = flush.flush(state, ALICE, "post_call")
    assert result.status == "flushed"
    stored = longterm.list(ALICE).items
    assert [f.text for f in stored] == ["The user's grocery card is [card]."]
    assert DIGITS not in (stored[0].source_text or "")
    assert holding(workspace, DIGITS, CARD) == []


def test_a_refused_flush_keeps_no_reply_in_its_dead_letter(embedder, chat_model, workspace, script):
    script.flush(*[text(f"- [fact|8] The user's card is {CARD}.") for _ in range(4)])
    strict = FileSystemLongTermMemory(workspace, embedder, redactor=Redactor("refuse"))
    try:
        flush = MemoryFlushManager(strict, chat_model, workspace, config=MemorySettings())
        state = AgentState(session_id="s1")
        state.append(Msg.user("Remember my card, please."), Msg.assistant("Noted."))
        result = flush.flush(state, ALICE, "post_call")
        assert result.status == "failed" and "sensitive data" in (result.error or "")
        assert strict.list(ALICE).items == []
    finally:
        strict.close()
    assert holding(workspace, "Remember my card")  # the dead letter keeps the messages
    assert holding(workspace, DIGITS, CARD) == []


def test_memory_save_tool_says_what_was_replaced(workspace, longterm):
    shortterm = build_shortterm(Settings(workspace=workspace), None)
    try:
        tools = MemoryTools(workspace, longterm, shortterm)
        arguments = json.dumps({"text": f"The user's card is {CARD}", "key": f"card {DIGITS}"})
        answer = tools.run(ALICE, ToolCall("c1", "memory_save", arguments))
    finally:
        shortterm.close()
    assert answer.ok and "2 [card]" in answer.text and DIGITS not in answer.text
    assert [(f.text, f.key) for f in longterm.list(ALICE).items] == [
        ("The user's card is [card]", "card [card]")
    ]
    assert holding(workspace, DIGITS, CARD) == []


def test_mcp_memory_save_returns_the_redactions(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(Settings(workspace=tmp_path / "ws"), embedder=embedder)
    server = build_server(services, lambda _ctx: Caller(Principal("acme", "user", "t"), "alice"))

    async def save() -> dict:
        async with Client(server) as client:
            result = await client.call_tool("memory_save", {"text": f"card {CARD} for rent"})
            return json.loads("".join(getattr(c, "text", "") for c in result.content))

    try:
        saved = anyio.run(save)
        stored = services.longterm.get(RuntimeContext("acme", "alice"), [saved["id"]])
    finally:
        services.close()
    assert saved["redacted"] == {"card": 1}
    assert stored[0].text == "card [card] for rent"
    assert holding(tmp_path, DIGITS, CARD) == []


# -- the benchmark's corpus ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["generated", "faker"])
def test_the_detector_meets_its_targets_on_each_corpus(capsys, name):
    bench.main(["--corpus", name, "--positives", "300", "--negatives", "300", "--seed", "3"])
    printed = capsys.readouterr().out
    make, _ = bench.CORPORA[name]
    result = bench.evaluate(make(300, 300, seed=3))
    for kind, row in result["kinds"].items():
        assert row["recall"] >= bench.TARGETS[kind], (kind, result["missed"])
    assert result["false_positive_rate"] <= bench.MAX_FALSE_POSITIVE_RATE, result["false_alarms"]
    assert f"{name} corpus, seed 3" in printed and "| card | 90 |" in printed


def test_the_faker_corpus_is_the_same_for_a_seed_and_holds_what_it_says():
    first, again = faker_corpus.corpus(60, 60, seed=5), faker_corpus.corpus(60, 60, seed=5)
    assert first == again  # seeded, and its identity numbers dated from a fixed day
    assert first != faker_corpus.corpus(60, 60, seed=6)
    positives = [s for s in first if s.kind != "none"]
    assert all(s.value and s.value in s.text for s in positives)
    ids = [s.value for s in positives if s.family == "cn-ric"]
    assert ids and all(len(v) == 18 and v[-1] == ric.calc_check_digit(v) for v in ids)
