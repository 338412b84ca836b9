"""The memory tools on the real files backend: schemas, literal search with sources, line
ranges, direct saves, session search, and paths that try to leave the user's memory folder."""

from __future__ import annotations

import json
import os

import pytest

from memory_service.config import Settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError, NotFoundError
from memory_service.domain.facts import Fact, Source
from memory_service.domain.limits import MAX_QUERY_BYTES, MAX_TAGS
from memory_service.domain.messages import MEMORY_TOOL_NAMES, Msg, ToolCall
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.fact_files import render_fact
from memory_service.services import build_shortterm
from memory_service.tools import TOOL_ARGUMENTS, MemoryTools
from memory_service.tools.arguments import MemorySearchArgs

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")
SECRET = "TOP-SECRET-CONTENT"


@pytest.fixture
def shortterm(workspace):
    memory = build_shortterm(Settings(workspace=workspace), None)
    yield memory
    memory.close()


@pytest.fixture
def tools(workspace, longterm, shortterm):
    return MemoryTools(workspace, longterm, shortterm)


@pytest.fixture
def alice_files(workspace, longterm):
    """MEMORY.md with metadata comments, and one ledger written through the backend."""
    paths = OwnerPaths.of(workspace, ALICE)
    paths.root.mkdir(parents=True)
    bullets = [
        render_fact(Fact("The user is allergic to peanuts.", importance=10)),
        render_fact(Fact("The user prefers window seats.", kind="preference")),
    ]
    paths.memory_md.write_text("# Long-term memory\n\n## Facts\n\n" + "\n".join(bullets) + "\n")
    longterm.record(ALICE, [Fact("The user bought PEANUT butter for the kids.", importance=3)])
    return paths


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(f"call-{name}", name, json.dumps(arguments))


def test_schemas_are_openai_functions_and_can_be_switched_off(workspace, longterm, shortterm):
    from memory_service.pipeline.consolidation import Consolidator
    from memory_service.pipeline.maintenance import MemoryMaintenance

    maintenance = MemoryMaintenance(
        longterm=longterm, workspace=workspace, consolidator=Consolidator(model=None)
    )
    schemas = MemoryTools(workspace, longterm, shortterm, maintenance=maintenance).schemas()
    assert [s["function"]["name"] for s in schemas] == [
        "memory_search",
        "memory_get",
        "memory_save",
        "session_search",
        "memory_extract",
        "memory_recall",
        "memory_consolidate",
        "memory_prune",
    ]
    assert set(MEMORY_TOOL_NAMES) == {s["function"]["name"] for s in schemas}
    for schema in schemas:
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
    get = next(s for s in schemas if s["function"]["name"] == "memory_get")
    assert get["function"]["parameters"]["required"] == ["path"]
    off = MemoryTools(workspace, longterm, shortterm, enabled=False)
    assert off.schemas() == []
    refused = off.run(ALICE, call("memory_search", query="peanuts"))
    assert not refused.ok and refused.error_code == "unknown_tool"
    assert [s["function"]["name"] for s in MemoryTools(workspace, longterm).schemas()] == [
        "memory_search",
        "memory_get",
        "memory_save",
        "memory_extract",
        "memory_recall",
    ]


def test_memory_search_is_literal_case_insensitive_with_sources(tools, alice_files):
    out = tools.memory_search(ALICE, "PeAnUt")
    recalled = sum(line.startswith("Recall: ") for line in out.splitlines())
    assert out.splitlines()[0] == f"2 matching lines, {recalled} recalled:"
    sources = [line for line in out.splitlines() if line.startswith("Source: ")]
    ledger = f"memory/{sorted(alice_files.ledger_dir.glob('*.md'))[0].name}"
    assert sources == [
        "Source: MEMORY.md#5: The user is allergic to peanuts.",
        f"Source: {ledger}#3: The user bought PEANUT butter for the kids.",
    ]
    recalls = [line for line in out.splitlines() if line.startswith("Recall: ")]
    assert recalls and "peanut" in recalls[0].lower() and "id=" in recalls[0]
    # the metadata comments are not searched
    assert "Source:" not in tools.memory_search(ALICE, '"importance"')
    # the line numbers are the ones memory_get reads
    assert tools.memory_get(ALICE, "MEMORY.md", 5, 5).endswith(
        "\n5|- The user is allergic to peanuts."
    )


def test_memory_search_sees_only_the_callers_files(tools, alice_files):
    assert "Source:" not in tools.memory_search(BOB, "peanut")
    assert tools.memory_search(BOB, "peanut") == "No memory matches 'peanut'."


def test_memory_get_reads_inclusive_one_based_ranges(tools, alice_files):
    assert (
        tools.memory_get(ALICE, "MEMORY.md", 1, 1)
        == "MEMORY.md lines 1-1 of 6 (more: start_line=2):\n1|# Long-term memory"
    )
    whole = tools.memory_get(ALICE, "MEMORY.md")
    assert whole.startswith("MEMORY.md lines 1-6 of 6:\n1|# Long-term memory")
    assert "<!--" not in whole
    tail = tools.memory_get(ALICE, "./MEMORY.md", 5, 99)
    assert tail.splitlines()[1:] == [
        "5|- The user is allergic to peanuts.",
        "6|- The user prefers window seats.",
    ]
    ledger = f"memory/{sorted(alice_files.ledger_dir.glob('*.md'))[0].name}"
    assert "\n3|- The user bought PEANUT butter" in tools.memory_get(ALICE, ledger, 3, 3)
    with pytest.raises(InvalidInputError, match="past the end: MEMORY.md has 6 lines"):
        tools.memory_get(ALICE, "MEMORY.md", 7)
    with pytest.raises(InvalidInputError, match="end_line must not be before start_line"):
        tools.memory_get(ALICE, "MEMORY.md", 3, 2)
    with pytest.raises(InvalidInputError, match="counts from 1"):
        tools.memory_get(ALICE, "MEMORY.md", 0, 2)
    with pytest.raises(NotFoundError, match="no memory file 'memory/2000-01-01.md'"):
        tools.memory_get(ALICE, "memory/2000-01-01.md")


TRAVERSALS = [
    "../bob/MEMORY.md",
    "../../../../etc/passwd",
    "/etc/passwd",
    "//etc/passwd",
    "~/MEMORY.md",
    "~bob/MEMORY.md",
    "memory/../../bob/MEMORY.md",
    "memory/../../../globex/users/alice/MEMORY.md",
    "memory/archive/../../../bob/MEMORY.md",
    "memory/..",
    "..",
    "..\\bob\\MEMORY.md",
    "memory\\..\\..\\bob\\MEMORY.md",
    "C:\\Windows\\win.ini",
    "C:/Windows/win.ini",
    "%2e%2e/bob/MEMORY.md",
    "%2E%2E%2Fbob%2FMEMORY.md",
    "memory/%2e%2e/%2e%2e/bob/MEMORY.md",
    "..%2fbob%2fMEMORY.md",
    "%252e%252e/bob/MEMORY.md",
    "MEMORY.md\x00.txt",
    "memory/2025-01-01.md\n../../bob/MEMORY.md",
    "\uff0e\uff0e/bob/MEMORY.md",  # fullwidth dots
    "\u2025/bob/MEMORY.md",  # two-dot leader
    "..\u2215bob\u2215MEMORY.md",  # division slash
    "file:///etc/passwd",
    "state/s1.json",
    "sessions/s1.log.jsonl",
    "dead-letters/flush.jsonl",
    "tool-results/s1/x.txt",
    "memory/sub/dir/x.md",
    "memory/.hidden.md",
    "memory/notes.txt",
    "",
    "   ",
    "a" * 600,
]


@pytest.mark.parametrize("path", TRAVERSALS, ids=range(len(TRAVERSALS)))
def test_paths_out_of_the_memory_folder_are_refused(tools, alice_files, workspace, path):
    bob = OwnerPaths.of(workspace, BOB)
    bob.root.mkdir(parents=True)
    bob.memory_md.write_text(f"- {SECRET}\n")
    with pytest.raises(InvalidInputError) as refused:
        tools.memory_get(ALICE, path)
    assert refused.value.message and SECRET not in refused.value.message
    outcome = tools.run(ALICE, call("memory_get", path=path))
    assert not outcome.ok and outcome.text.startswith("error (") and SECRET not in outcome.text


def test_refusals_say_why(tools, alice_files):
    cases = {
        "../bob/MEMORY.md": "'..' is refused",
        "/etc/passwd": "absolute paths are refused",
        "%2e%2e/x": "percent-encoded",
        "MEMORY.md\x00": "NUL",
        "\uff0e\uff0e/x": "plain ASCII",
        "..\\x": "use '/'",
        "state/s1.json": "is not a memory file",
    }
    for path, reason in cases.items():
        with pytest.raises(InvalidInputError, match=reason):
            tools.memory_get(ALICE, path)


def test_symlinks_that_lead_out_are_refused(tools, alice_files, workspace, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text(f"- {SECRET}\n")
    bob = OwnerPaths.of(workspace, BOB)
    bob.root.mkdir(parents=True)
    bob.memory_md.write_text(f"- {SECRET}\n")
    state_file = alice_files.root / "state" / "s1.json"
    state_file.parent.mkdir()
    state_file.write_text(SECRET)
    links = {
        "memory/escape.md": outside,
        "memory/bob.md": bob.memory_md,
        "memory/state.md": state_file,  # inside the user's folder, but not a memory file
    }
    for name, target in links.items():
        os.symlink(target, alice_files.root / name)
    for name in links:
        with pytest.raises(InvalidInputError, match="escapes|outside"):
            tools.memory_get(ALICE, name)
    # a linked memory folder is refused too, and search skips what it cannot read
    other = RuntimeContext("acme", "carol", "s1")
    carol = OwnerPaths.of(workspace, other)
    carol.root.mkdir(parents=True)
    os.symlink(bob.root, carol.ledger_dir)
    with pytest.raises(InvalidInputError):
        tools.memory_get(other, "memory/../MEMORY.md")
    lines = tools.memory_search(ALICE, SECRET).splitlines()
    assert not [line for line in lines if line.startswith("Source:") and SECRET in line]


def test_memory_save_writes_directly_without_a_model(tools, longterm, workspace):
    said = tools.memory_save(ALICE, "The user is vegetarian.", key="user.diet", importance=8)
    [fact] = longterm.list(ALICE).items
    assert said == f"Saved (id={fact.id})."
    assert (fact.text, fact.key, fact.importance, fact.source) == (
        "The user is vegetarian.",
        "user.diet",
        8,
        Source("memory_save", "s1"),  # called directly: no user message to cite
    )
    assert fact.session_id == "s1"
    assert (
        tools.memory_save(ALICE, "the user is  VEGETARIAN.")
        == f"Already remembered (id={fact.id})."
    )
    replaced = tools.run(ALICE, call("memory_save", text="The user is vegan.", key="user.diet"))
    assert replaced.ok and fact.id in replaced.text and "replaces" in replaced.text
    assert [f.text for f in longterm.list(ALICE).items] == ["The user is vegan."]
    assert (  # the code a fact with this importance gets everywhere else
        "error (invalid_fact): importance must be an integer 1-10"
        in tools.run(ALICE, call("memory_save", text="x fact", importance=11)).text
    )
    assert not tools.run(ALICE, call("memory_save", text="   ")).ok
    assert "Source: memory/" in tools.memory_search(ALICE, "vegan")


def test_session_search_finds_past_sessions_of_the_same_user(tools, shortterm):
    shortterm.append(ALICE.with_session("old"), [Msg.user("My sister Ana lives in Oslo.")])
    shortterm.append(BOB.with_session("old"), [Msg.user("Oslo is cold.")])
    out = tools.session_search(ALICE, "oslo")
    assert out.startswith("Session old#0 (user, ") and "My sister Ana lives in Oslo." in out
    assert "cold" not in out
    assert tools.session_search(ALICE, "zanzibar") == "No past message matches 'zanzibar'."


def test_run_returns_errors_as_text_for_the_model(tools, alice_files):
    assert tools.run(ALICE, ToolCall("c", "memory_search", "{not json")).text.startswith("error (")
    assert (
        "arguments must be a JSON object"
        in tools.run(ALICE, ToolCall("c", "memory_get", "[]")).text
    )
    assert (
        "unexpected keyword argument 'x'"
        in tools.run(ALICE, call("memory_search", query="a", x=1)).text
    )
    blank = tools.run(ALICE, call("memory_search", query=" "))
    assert blank.error_code == "invalid_query" and "query must not be empty" in blank.text
    ok = tools.run(ALICE, call("memory_get", path="MEMORY.md", start_line="5", end_line=5.0))
    assert ok.ok and ok.text.endswith("allergic to peanuts.")
    unknown = tools.run(ALICE, call("delete_everything"))
    assert unknown.error_code == "unknown_tool" and "memory_search" in unknown.text


def test_each_tool_is_described_and_checked_by_its_argument_model(tools, alice_files):
    """The schema sent to the model and the validation of its answer are one pydantic model;
    the schema is plain JSON Schema (no pydantic titles, optional fields as their type)."""
    for schema in tools.schemas():
        function = schema["function"]
        model = TOOL_ARGUMENTS[function["name"]]
        assert function == model.openai_tool()["function"]
        assert "title" not in json.dumps(function["parameters"])
        assert function["parameters"]["additionalProperties"] is False
    params = {s["function"]["name"]: s["function"]["parameters"] for s in tools.schemas()}
    assert params["memory_get"]["properties"]["start_line"] == {
        "type": "integer",
        "minimum": 1,
        "description": "1-based",
    }
    importance = params["memory_save"]["properties"]["importance"]
    assert (importance["minimum"], importance["maximum"]) == (1, 10)
    assert params["memory_search"]["properties"]["query"]["maxLength"] == MAX_QUERY_BYTES

    refused = {
        "start_line must be an integer": call("memory_get", path="MEMORY.md", start_line=True),
        "start_line counts from 1": call("memory_get", path="MEMORY.md", start_line=0),
        "missing required argument 'query'": call("memory_search"),
        f"over {MAX_QUERY_BYTES} bytes": call("session_search", query="x" * (MAX_QUERY_BYTES + 1)),
        "text must be a string": call("memory_save", text=3),
    }
    for said, bad in refused.items():
        outcome = tools.run(ALICE, bad)
        assert not outcome.ok and outcome.text.startswith("error (") and said in outcome.text
    with pytest.raises(InvalidInputError, match="importance must be an integer 1-10"):
        tools.memory_save(ALICE, "The user likes tea.", importance=0)


def test_memory_search_filters_its_recall(tools, longterm):
    longterm.record(
        ALICE,
        [
            Fact("The user sets the coffee grinder to fine", kind="procedure", tags=("gear",)),
            Fact("The user drinks coffee at the corner cafe", importance=3),
        ],
    )
    got = tools.run(ALICE, call("memory_search", query="coffee", kind="procedure"))
    assert got.ok and "grinder" in got.text and "corner cafe" not in got.text
    assert got.text.startswith("Recall: ")  # no literal file lines: they cannot be filtered
    by_tag = tools.run(ALICE, call("memory_search", query="coffee", tags=["gear"])).text
    assert "grinder" in by_tag and "corner" not in by_tag
    important = tools.run(ALICE, call("memory_search", query="coffee", min_importance=5)).text
    assert "grinder" in important and "corner" not in important
    future = tools.run(ALICE, call("memory_search", query="coffee", as_of="2999-01-01T00:00:00"))
    assert future.error_code == "invalid_filter" and "as_of" in future.text
    bad_kind = tools.run(ALICE, call("memory_search", query="coffee", kind="opinion"))
    assert not bad_kind.ok and "kind" in bad_kind.text
    params = MemorySearchArgs.openai_tool()["function"]["parameters"]["properties"]
    assert params["kind"]["enum"] == ["fact", "preference", "event", "procedure"]
    assert params["tags"]["maxItems"] == MAX_TAGS


def test_memory_search_recalls_the_agents_and_tenants_memory_and_says_so(tools, longterm):
    from memory_service.domain.context import RuntimeContext

    carol = RuntimeContext("acme", "carol", "s1", agent_id="support")
    longterm.record(carol, [Fact("Parking badges are at the front desk", scope="tenant")])
    longterm.record(carol, [Fact("Parking refunds need a receipt", scope="agent")])
    out = tools.memory_search(carol, "parking")
    assert "Parking badges are at the front desk" in out and "tenant memory" in out
    assert "Parking refunds need a receipt" in out and "agent memory" in out
    no_agent = tools.memory_search(RuntimeContext("acme", "dan", "s1"), "parking")
    assert "front desk" in no_agent and "receipt" not in no_agent
    assert "front desk" not in tools.memory_search(RuntimeContext("globex", "carol"), "parking")


def test_a_memory_that_needs_verification_is_marked_in_every_tool_view(tools, longterm):
    from datetime import timedelta

    from memory_service.domain.facts import utcnow

    old = utcnow() - timedelta(days=75)  # an event: e^-0.75 = 0.47
    longterm.record(
        ALICE,
        [
            Fact("The user adopted a cat named Miso", kind="event", importance=8, created_at=old),
            Fact("The user feeds the cat at seven", kind="procedure", importance=8),
        ],
    )
    lines = tools.run(ALICE, call("memory_search", query="cat", kind="episodic")).text
    assert "Miso" in lines and "needs verification, confidence=0.47" in lines
    assert "seven" not in lines
    listed = tools.run(ALICE, call("memory_search", query="*")).text.split("\n")
    miso = next(line for line in listed if "Miso" in line)
    seven = next(line for line in listed if "seven" in line)
    assert "needs verification" in miso and "needs verification" not in seven
