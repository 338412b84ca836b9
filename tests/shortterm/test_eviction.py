"""Tool-result eviction: big results to files, a preview in the state, read back safely."""

from __future__ import annotations

import os

import pytest

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidIdError, InvalidInputError, NotFoundError
from memory_service.domain.messages import Msg, ToolCall
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")

BIG = "\n".join(f"line {i}: " + "x" * 40 for i in range(1, 501))  # 500 lines, ~25k chars


@pytest.fixture
def evictor(tmp_path) -> FilesToolResultStore:
    return FilesToolResultStore(tmp_path / "ws", max_chars=1000, preview_chars=120)


def test_a_big_tool_result_goes_to_a_file_and_reads_back(evictor, tmp_path):
    original = Msg.tool("call_42", BIG, metadata={"tool": "grep"})
    preview = evictor.evict(ALICE, original)

    ref = "tool-results/s1/call_42.txt"
    assert preview.mark == "tool_result"
    assert preview.role == "tool" and preview.tool_call_id == "call_42"
    assert preview.metadata == {"tool": "grep", "ref": ref, "chars": len(BIG), "lines": 500}
    assert ref in preview.content
    assert BIG[:120] in preview.content
    assert len(preview.content) < 400
    path = tmp_path / "ws/tenants/acme/users/alice" / ref
    assert path.read_text(encoding="utf-8") == BIG

    assert evictor.read(ALICE, ref) == BIG
    lines = BIG.splitlines(keepends=True)
    assert evictor.read(ALICE, ref, 2, 3) == lines[1] + lines[2]
    assert evictor.read(ALICE, ref, 2, 3).startswith("line 2:")
    assert evictor.read(ALICE, ref, 500).startswith("line 500:")
    assert evictor.read(ALICE, ref, 499, 10_000).count("\n") == 1
    assert evictor.read(ALICE, ref, end_line=1) == lines[0]
    assert evictor.read(ALICE, ref, 600, 700) == ""


def test_the_state_keeps_the_preview_and_the_trail_keeps_the_reference(evictor):
    state = AgentState(session_id="s1")
    state.append(Msg.user("search the logs"))
    state.append(Msg.assistant(tool_calls=(ToolCall("call_42", "grep", "{}"),)))
    state.append(evictor.evict(ALICE, Msg.tool("call_42", BIG)))
    assert state.tool_trail[-1].result_ref == "tool-results/s1/call_42.txt"
    assert state.tool_trail[-1].result_chars == len(BIG)
    assert state.token_estimate < 300  # the preview, not the 25k characters


def test_small_results_and_other_messages_stay_as_they_are(evictor):
    small = Msg.tool("c1", "short")
    assert evictor.evict(ALICE, small) is small
    big_user = Msg.user(BIG)
    assert evictor.evict(ALICE, big_user) is big_user  # only tool results are evicted


def test_unsafe_call_ids_get_a_generated_name_and_names_never_collide(evictor):
    weird = evictor.evict(ALICE, Msg.tool("../../etc/passwd", BIG))
    ref = weird.metadata["ref"]
    assert ref.startswith("tool-results/s1/") and ".." not in ref
    first = evictor.evict(ALICE, Msg.tool("dup", BIG))
    second = evictor.evict(ALICE, Msg.tool("dup", BIG + "!"))
    assert first.metadata["ref"] != second.metadata["ref"]
    assert evictor.read(ALICE, second.metadata["ref"]).endswith("!")


@pytest.mark.parametrize(
    "ref",
    [
        "/etc/passwd",
        "../../../../etc/passwd",
        "tool-results/../state/s1.json",
        "tool-results/s1/../../MEMORY.md",
        "state/s1.json",
        "MEMORY.md",
        "",
    ],
)
def test_references_outside_the_users_tool_results_are_refused(evictor, ref):
    evictor.evict(ALICE, Msg.tool("call_1", BIG))
    with pytest.raises(InvalidInputError):
        evictor.read(ALICE, ref)


def test_a_symlink_out_of_the_folder_is_refused(evictor, tmp_path):
    evictor.evict(ALICE, Msg.tool("call_1", BIG))
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    link = tmp_path / "ws/tenants/acme/users/alice/tool-results/s1/link.txt"
    os.symlink(secret, link)
    with pytest.raises(InvalidIdError) as caught:
        evictor.read(ALICE, "tool-results/s1/link.txt")
    assert caught.value.code == "path_outside_user"


def test_another_users_reference_finds_nothing(evictor):
    evictor.evict(ALICE, Msg.tool("call_1", BIG))
    with pytest.raises(NotFoundError):
        evictor.read(BOB, "tool-results/s1/call_1.txt")


def test_bad_line_ranges_are_refused(evictor):
    ref = evictor.evict(ALICE, Msg.tool("call_1", BIG)).metadata["ref"]
    with pytest.raises(InvalidInputError):
        evictor.read(ALICE, ref, 0, 3)
    with pytest.raises(InvalidInputError):
        evictor.read(ALICE, ref, 5, 4)


def test_removing_a_session_removes_its_results(evictor):
    ref = evictor.evict(ALICE, Msg.tool("call_1", BIG)).metadata["ref"]
    other = evictor.evict(ALICE.with_session("s2"), Msg.tool("call_1", BIG)).metadata["ref"]
    assert evictor.remove_session(ALICE) == 1
    with pytest.raises(NotFoundError):
        evictor.read(ALICE, ref)
    assert evictor.read(ALICE.with_session("s2"), other) == BIG
