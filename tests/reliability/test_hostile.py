"""Hostile input: schema fuzzing, path traversal on every path-taking input, oversized bodies,
and ids, keys and tags that would break a Markdown ledger. Every answer is a clean 4xx.

The long fuzzing run is ``python -m tests.support.reliability.fuzz``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError, NotFoundError
from memory_service.domain.messages import ToolCall
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.fact_files import parse_fact_file
from memory_service.services import build_services
from memory_service.tools import MemoryTools
from tests.support.llm_server import text, tool_calls
from tests.support.reliability.fuzz import fuzz_services
from tests.support.reliability.isolation import echo_responder
from tests.support.server import ServerProcess, write_keys

ACME = "acme-key-0123456789abcdef"
GLOBEX = "globex-key-0123456789abcdef"
KEYS = {ACME: {"tenant": "acme", "role": "user"}, GLOBEX: {"tenant": "globex", "role": "user"}}
CANARY = "CANARY-7f3a"  # planted wherever a traversal could lead; must never come back


def auth(key: str = ACME) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# -- 1. schema fuzzing -----------------------------------------------------------------------


@pytest.mark.slow
def test_fuzzing_the_openapi_schema_gives_no_server_error(tmp_path, embedder):
    report = fuzz_services(tmp_path, examples=12, embedder=embedder, seed=0)

    result = report.to_dict()
    assert result["operations"] >= 17  # every route of the app was exercised
    assert result["cases"] >= 300
    assert result["responses_5xx"] == 0, result["server_error_samples"]
    assert result["bad_error_bodies"] == []  # every 4xx is {"error": {"code", "message"}}


# -- 2. path traversal -----------------------------------------------------------------------


def traversal_attempts(inside: str) -> list[str]:
    """Ways out of a folder, each prefixed by the legitimate ``inside`` prefix or not."""
    targets = ["etc/passwd", "tenants/globex/users/alice/MEMORY.md", "outside/secret.md"]
    climbs = ["../", "../../", "../../../../../../../../", "./../", "..//", ".././"]
    attempts = [
        f"{prefix}{climb}{target}"
        for prefix in ("", inside)
        for climb in climbs
        for target in targets
    ]
    attempts += [
        "..",
        "../",
        "/etc/passwd",
        "//etc/passwd",
        "/tmp",
        "~/secret.md",
        "~root/.ssh/id_rsa",
        "C:\\Windows\\win.ini",
        "C:/Windows/win.ini",
        "file:///etc/passwd",
        "\\\\host\\share",
        "..\\..\\etc\\passwd",
        f"{inside}..\\..\\..\\MEMORY.md",
        "%2e%2e/%2e%2e/etc/passwd",
        "..%2f..%2fetc%2fpasswd",
        "%2e%2e%2f%2e%2e%2fMEMORY.md",
        "%252e%252e%252fetc%252fpasswd",
        "..%c0%af..%c0%afetc/passwd",
        "..%5c..%5cetc",
        f"{inside}%2e%2e/%2e%2e/MEMORY.md",
        "\uff0e\uff0e/\uff0e\uff0e/etc/passwd",
        "\u2024\u2024/\u2024\u2024/etc/passwd",
        "..\u2215..\u2215etc\u2215passwd",
        "..\uff0f..\uff0fetc",
        "\u202e../../etc/passwd",
        "MEMORY.md\x00",
        "MEMORY.md\x00../../etc/passwd",
        f"{inside}a.md\x00.txt",
        "\x00",
        f"{inside}\n../../MEMORY.md",
        "memory/\r\n",
        "MEMORY.md\t",
        " ../etc/passwd",
        "a" * 10_000,
        f"{inside}{'a' * 300}.md",
        "../" * 2_000 + "etc/passwd",
        f"{inside}{'x/' * 600}a.md",
        f"{inside}{'../' * 100}",
        f"{inside}link-out.md",
        f"{inside}link-globex.md",
        f"{inside}link-dir/2020-01-01.md",
        "link-root/MEMORY.md",
        "state/s1.json",
        "sessions/s1.log.jsonl",
        ".memory.lock",
        "memory/archive/../../../x.md",
        "memory/./../../../x.md",
        "MEMORY.md/../../x",
        "",
        " ",
        ".",
        "./",
        "memory/",
        f"{inside}.",
        "tool-results/../MEMORY.md",
    ]
    return attempts


@pytest.fixture
def hostile(tmp_path, embedder, monkeypatch, llm_server):
    """alice@acme's folder with symlinks that lead out, and canaries everywhere else."""
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    llm_server.responder = echo_responder
    settings = load_settings(
        workspace=tmp_path / "ws",
        llm={"base_url": llm_server.base_url, "model": "m", "context_window": 32_000},
        shortterm={"tool_result_max_chars": 300, "tool_result_preview_chars": 50},
    )
    services = build_services(settings, embedder=embedder)
    client = TestClient(create_app(services, ApiKeyRing(KEYS)))
    ws = settings.workspace
    for key, user in ((ACME, "alice"), (GLOBEX, "alice"), (ACME, "bob")):
        secret = "alice's fact" if (key, user) == (ACME, "alice") else f"{CANARY} of {user}"
        body = {"user_id": user, "facts": [{"text": secret}]}
        assert client.post("/v1/memories", json=body, headers=auth(key)).status_code == 200
    (ws / "tenants/globex/users/alice/MEMORY.md").write_text(f"- {CANARY} globex\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"- {CANARY} outside\n")
    (ws / "api-keys.json").write_text(json.dumps({CANARY: {}}))
    alice = OwnerPaths(ws, "acme", "alice")
    message = {"role": "user", "content": f"{CANARY} in the state and log"}
    append = {"user_id": "alice", "messages": [message]}
    assert client.post("/v1/sessions/s1/messages", json=append, headers=auth()).status_code == 200
    big = {"role": "tool", "tool_call_id": "call1", "content": "tool output line\n" * 40}
    append = {"user_id": "alice", "messages": [{"role": "assistant", "content": "ok"}, big]}
    reply = client.post("/v1/sessions/s1/messages", json=append, headers=auth())
    assert reply.json()["evicted"] == ["tool-results/s1/call1.txt"]
    links = {
        alice.ledger_dir / "link-out.md": outside / "secret.md",
        alice.ledger_dir / "link-globex.md": ws / "tenants/globex/users/alice/MEMORY.md",
        alice.ledger_dir / "link-dir": ws / "tenants/acme/users/bob/memory",
        alice.root / "link-root": ws / "tenants/globex/users/alice",
        alice.root / "tool-results/s1/link-out.txt": outside / "secret.md",
        alice.root / "tool-results/s1/link-state.txt": alice.state_file("s1"),
        alice.root / "tool-results/link-bob": ws / "tenants/acme/users/bob",
    }
    for link, target in links.items():
        os.symlink(target, link)
    yield services, client, alice
    client.close()
    services.close()


def _no_canary(text: str) -> bool:
    return CANARY not in text


def test_memory_get_refuses_every_traversal(hostile):
    services, _, alice = hostile
    tools = MemoryTools(services.settings.workspace, services.longterm, services.shortterm)
    ctx = RuntimeContext("acme", "alice", "s1")
    ledger = next(alice.ledger_dir.glob("20*.md")).name
    assert tools.run(ctx, ToolCall("ok", "memory_get", json.dumps({"path": f"memory/{ledger}"}))).ok

    attempts = traversal_attempts("memory/")
    assert len(attempts) >= 50
    for number, path in enumerate(attempts):
        call = ToolCall(f"c{number}", "memory_get", json.dumps({"path": path}))
        outcome = tools.run(ctx, call)
        assert not outcome.ok and outcome.text.startswith("error"), (path, outcome.text)
        assert _no_canary(outcome.text), path
        with pytest.raises((InvalidInputError, NotFoundError)):
            tools.memory_get(ctx, path)


def test_memory_get_through_chat_refuses_every_traversal(hostile, llm_server):
    """The model itself asks for the paths (one turn, one tool call per attempt): every
    result it gets back is an error, and no canary reaches it."""
    _, client, _ = hostile
    attempts = traversal_attempts("memory/")
    calls = [("memory_get", {"path": p}, f"call{i}") for i, p in enumerate(attempts)]
    llm_server.push(tool_calls(*calls), text("done"))

    body = {"user_id": "alice", "session_id": "chat", "message": "read my files"}
    reply = client.post("/v1/chat", json=body, headers=auth())

    assert reply.status_code == 200, reply.text
    outcomes = reply.json()["memory"]["tool_calls"]
    assert len(outcomes) == len(attempts) and not any(o["ok"] for o in outcomes)
    answered = [r for r in llm_server.chat_requests if any(m["role"] == "tool" for m in r.messages)]
    results = [m for m in answered[0].messages if m["role"] == "tool"]
    assert len(results) == len(attempts)
    # a result over the fixture's 300 characters is evicted as it returns: the model reads
    # its preview, which must be the error's start
    assert all(_as_read(m["content"]).startswith("error") for m in results)
    assert all(_no_canary(json.dumps(r.body)) for r in llm_server.chat_requests)


def _as_read(content: str) -> str:
    """A tool result's text as the model reads it: an evicted one's preview, after its header."""
    if content.startswith("[tool result stored outside the conversation:"):
        return content.split("\n", 1)[1]
    return content


def test_links_planted_in_a_users_folder_never_reach_recall_or_tools(hostile):
    """memory/link-globex.md -> another tenant's MEMORY.md, memory/link-out.md -> a file
    outside the workspace: list, every search mode and memory_search ignore them."""
    services, client, _ = hostile
    listed = client.get("/v1/memories", params={"user_id": "alice"}, headers=auth())
    assert listed.status_code == 200 and _no_canary(listed.text)
    assert [f["text"] for f in listed.json()["items"]] == ["alice's fact"]
    for mode in ("hybrid", "bm25", "dense"):
        body = {"user_id": "alice", "query": f"{CANARY} globex outside", "mode": mode}
        found = client.post("/v1/memories/search", json=body, headers=auth())
        assert found.status_code == 200 and _no_canary(found.text), mode
    tools = MemoryTools(services.settings.workspace, services.longterm, services.shortterm)
    said = tools.memory_search(RuntimeContext("acme", "alice", "s1"), CANARY)
    assert _no_canary(said.replace(f"No memory matches '{CANARY}'.", ""))


def test_tool_result_refs_refuse_every_traversal(hostile):
    _, client, _ = hostile
    url = "/v1/sessions/s1/tool-results"
    good = client.get(
        url, params={"user_id": "alice", "ref": "tool-results/s1/call1.txt"}, headers=auth()
    )
    assert good.status_code == 200 and "tool output line" in good.json()["text"]

    attempts = traversal_attempts("tool-results/s1/") + [
        "tool-results/s1/link-out.txt",
        "tool-results/s1/link-state.txt",
        "tool-results/link-bob/MEMORY.md",
        "tool-results/../state/s1.json",
        "tool-results/s1/../../sessions/s1.log.jsonl",
        "tool-results/s1",
        "tool-results",
    ]
    assert len(attempts) >= 50
    for ref in attempts:
        got = client.get(url, params={"user_id": "alice", "ref": ref}, headers=auth())
        assert 400 <= got.status_code < 500, (ref, got.status_code, got.text[:200])
        assert got.json()["error"]["code"] and _no_canary(got.text), ref


@pytest.mark.slow
def test_path_parameters_refuse_every_traversal(hostile):
    """memory ids, session ids and user ids in the URL: never a 5xx, never another folder's
    data, and nothing created or deleted on disk. (A client that normalises ``a/../b`` sends a
    plain valid id: alice's own, empty, session ``MEMORY.md`` is a fine answer to that.)"""
    _, client, alice = hostile
    ws = alice.workspace
    before = sorted(str(p) for p in ws.rglob("*"))
    attempts = traversal_attempts("")
    assert len(attempts) >= 50
    answered = 0
    for raw in attempts:
        for value in (quote(raw, safe=""), quote(raw, safe="/")):
            urls = [
                ("GET", f"/v1/memories/{value}?user_id=alice"),
                ("DELETE", f"/v1/memories/{value}?user_id=alice"),
                ("GET", f"/v1/sessions/{value}?user_id=alice"),
                ("DELETE", f"/v1/sessions/{value}?user_id=alice"),
                ("GET", f"/v1/sessions/{value}/tool-results?user_id=alice&ref=x"),
                ("DELETE", f"/v1/users/{value}/memories"),
                ("GET", f"/v1/memories?user_id={quote(raw, safe='')}"),
                ("GET", f"/v1/sessions?user_id={quote(raw, safe='')}"),
            ]
            for method, url in urls:
                got = client.request(method, url, headers=auth())
                assert got.status_code < 500, (method, url[:120], got.text[:200])
                assert _no_canary(got.text), url
                answered += 1
    assert answered >= 50 * 8
    after = sorted(str(p) for p in ws.rglob("*"))
    assert set(before) <= set(after)  # nothing deleted
    created = [Path(p) for p in set(after) - set(before)]  # a session's lock, in alice's folder
    assert all(p.suffix == ".lock" and p.is_relative_to(alice.root) for p in created), created


@pytest.mark.slow  # one append per traversal attempt
def test_hostile_tool_call_ids_keep_evicted_results_in_the_session_folder(hostile):
    """An evicted tool result is named after its tool_call_id: a hostile id never makes the
    file land anywhere but tool-results/<session>/."""
    _, client, alice = hostile
    folder = (alice.root / "tool-results" / "s2").resolve()
    ids = traversal_attempts("")
    ids = [i for i in ids if 0 < len(i) <= 256 and i.strip()]
    assert len(ids) >= 50
    outside_before = sorted(str(p) for p in alice.workspace.parent.rglob("*"))
    for number, call_id in enumerate(ids):
        messages = [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "function": {"name": "t", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": f"result {number}\n" * 60},
        ]
        got = client.post(
            "/v1/sessions/s2/messages",
            json={"user_id": "alice", "messages": messages},
            headers=auth(),
        )
        assert got.status_code in (200, 422), got.text
        for ref in got.json().get("evicted", []) if got.status_code == 200 else []:
            assert (alice.root / ref).resolve().parent == folder, ref
    created = set(map(str, alice.workspace.parent.rglob("*"))) - set(outside_before)
    usage = alice.tenant_root / "usage.json"  # the tenant's token counts (compaction ran)
    strays = [
        p
        for p in created
        if not Path(p).resolve().is_relative_to(alice.root.resolve())
        and not p.startswith(str(usage))
    ]
    assert strays == []


# -- 3. oversized bodies ---------------------------------------------------------------------


def test_oversized_bodies_are_refused_with_and_without_content_length(
    tmp_path, embedder, monkeypatch
):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(workspace=tmp_path / "ws", api={"max_body_bytes": 4096})
    services = build_services(settings, embedder=embedder)
    try:
        with TestClient(create_app(services, ApiKeyRing(KEYS))) as client:
            body = json.dumps({"user_id": "alice", "facts": [{"text": "x" * 8000}]}).encode()
            sized = client.post("/v1/memories", content=body, headers=auth())
            chunked = client.post(
                "/v1/memories",
                content=(body[i : i + 1000] for i in range(0, len(body), 1000)),
                headers=auth() | {"content-type": "application/json"},
            )
            small = client.post(
                "/v1/memories",
                json={"user_id": "alice", "facts": [{"text": "fits"}]},
                headers=auth(),
            )
        for refused in (sized, chunked):
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["code"] == "payload_too_large"
        assert small.status_code == 200
        assert services.longterm.list(RuntimeContext("acme", "alice")).items[0].text == "fits"
    finally:
        services.close()


@pytest.mark.subprocess
def test_a_chunked_body_without_length_is_refused_before_it_is_read_whole(tmp_path):
    """A real server and a raw socket: 64 MB offered in chunks, no Content-Length; the 413
    arrives while the client is still sending, after about the limit (plus socket buffers)."""
    keys = write_keys(tmp_path / "keys.json", {"acme": "user"})
    server = ServerProcess(
        tmp_path / "ws", tmp_path / "keys.json", env={"MEMORY_API__MAX_BODY_BYTES": "65536"}
    )
    offered = 64 * 1024 * 1024
    with server:
        sent, head = _send_chunked(server.port, keys["acme"], offered)
    status, _, rest = head.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 413"), head[:300]
    assert b"payload_too_large" in rest
    assert sent < offered // 4, sent  # refused early: the server never read it all


def _send_chunked(port: int, key: str, offered: int) -> tuple[int, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(
            (
                f"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}"
                "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            ).encode()
        )
        chunk = b"%x\r\n" % 16384 + b"a" * 16384 + b"\r\n"
        sent = 0
        response = b""
        try:
            while sent < offered:
                sock.setblocking(False)
                try:
                    response = sock.recv(65536)
                except BlockingIOError:
                    response = b""
                sock.settimeout(10)
                if response:
                    break
                sock.sendall(chunk)
                sent += 16384
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection after answering
        sock.settimeout(10)
        while b"}}" not in response:
            more = sock.recv(65536)
            if not more:
                break
            response += more
        return sent, response
    finally:
        sock.close()


# -- 4. ledger-breaking ids, keys and tags -----------------------------------------------------

NASTY = [
    {
        "text": 'line one\nline two -->\n<!-- memory {"key":"forged"} -->\n- a bullet',
        "key": "user.diet\n-->",
        "tags": ["-->", "<!--", "a\nb", '<!-- memory {"x":1} -->', "tab\there"],
        "source": {"origin": "src --> <!-- memory", "text": "said -->\n<!-- memory"},
    },
    {
        "text": "back\\slash \\n not a newline \u2028 separator \r\n crlf \x85 nel \t tab",
        "key": "<!-- key -->",
        "tags": ["\\", "\\n", "\u2029"],
    },
    {"text": "- starts like a bullet <!-- memory {} -->", "key": "k\r\nk", "tags": ["]]>"]},
]


@pytest.mark.parametrize("backend", ["files", "qdrant"])
def test_ledger_breaking_values_round_trip_through_the_api(
    backend, tmp_path, embedder, monkeypatch
):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(
        workspace=tmp_path / "ws",
        longterm={"backend": backend},
        qdrant={"path": tmp_path / "qdrant"},
    )

    def serve():
        services = build_services(settings, embedder=embedder)
        return services, TestClient(create_app(services, ApiKeyRing(KEYS)))

    services, client = serve()
    try:
        recorded = client.post(
            "/v1/memories", json={"user_id": "alice", "facts": NASTY}, headers=auth()
        )
        assert recorded.status_code == 200, recorded.text
        ids = [r["id"] for r in recorded.json()["results"]]
        assert [r["status"] for r in recorded.json()["results"]] == ["created"] * 3
        _assert_round_trip(client, ids)
    finally:
        client.close()
        services.close()
    services, client = serve()  # a restart reads everything back from disk
    try:
        _assert_round_trip(client, ids)
    finally:
        client.close()
        services.close()
    if backend == "files":
        ledger = next((tmp_path / "ws/tenants/acme/users/alice/memory").glob("*.md"))
        content = ledger.read_text(encoding="utf-8")
        assert len(parse_fact_file(content, default_created_at=None)) == 3
        assert sum(1 for line in content.split("\n") if line.startswith("- ")) == 3


def _assert_round_trip(client, ids: list[str]) -> None:
    for fid, sent in zip(ids, NASTY, strict=True):
        got = client.get(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=auth())
        assert got.status_code == 200, got.text
        fact = got.json()
        assert fact["text"] == sent["text"] and fact["key"] == sent["key"]
        assert fact["tags"] == sent["tags"]
        got, want = fact.get("source"), sent.get("source")
        assert ({k: got[k] for k in want} if got else None) == want
    listed = client.get("/v1/memories", params={"user_id": "alice"}, headers=auth()).json()
    assert sorted(f["text"] for f in listed["items"]) == sorted(f["text"] for f in NASTY)
    hits = client.post(
        "/v1/memories/search",
        json={"user_id": "alice", "query": "bullet forged", "mode": "bm25"},
        headers=auth(),
    ).json()["hits"]
    assert hits and hits[0]["id"] in ids and "forged" not in hits[0]["key"]
