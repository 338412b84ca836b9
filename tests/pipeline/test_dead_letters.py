"""The dead-letter file's contract, without a model: appends are durable lines of the typed
record; reads keep every line's bytes and count what is not an entry of the folder's user;
a rewrite changes only the lines it was given, once each, and keeps lines appended meanwhile."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths
from memory_service.stores.dead_letters.files import FilesDeadLetterBox, has_dead_letters
from memory_service.stores.dead_letters.record import DeadLetterRecord

OWNER = RuntimeContext("acme", "alice")
CTX = OWNER.with_session("s1")
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def record(*said: str, ctx: RuntimeContext = CTX) -> DeadLetterRecord:
    messages = [Msg.user(s).with_seq(i + 3) for i, s in enumerate(said or ("I like tea.",))]
    return DeadLetterRecord.of_flush(
        ctx,
        reason="pre_compaction",
        error="llm_error: down",
        attempts=2,
        messages=messages,
        reply="x" * 5_000,
        at=AT,
    )


def test_an_appended_record_reads_back_with_its_fields(workspace):
    letters = FilesDeadLetterBox.of(workspace, OWNER)
    assert not letters.exists() and not has_dead_letters(OwnerPaths.of(workspace, OWNER))

    letters.append(record("I like tea.", "I moved to Porto.\u2028Really."))

    assert letters.relative == "dead-letters/flush.jsonl"
    assert letters.path == OwnerPaths.of(workspace, OWNER).flush_dead_letters.resolve()
    assert has_dead_letters(OwnerPaths.of(workspace, OWNER))
    [line] = letters.path.read_bytes().split(b"\n")[:-1]  # one line, U+2028 raw inside it
    entry = json.loads(line)
    assert entry["version"] == 1 and (entry["from_seq"], entry["through_seq"]) == (3, 4)
    assert entry["at"] == AT.isoformat() and len(entry["reply"]) == 4_000
    read = letters.read(OWNER)
    assert read.malformed == 0
    [letter] = read.letters
    assert letter.line == line and letter.ctx == CTX
    assert [m.content for m in letter.record.messages] == [
        "I like tea.",
        "I moved to Porto.\u2028Really.",
    ]
    assert (letter.record.reason, letter.record.attempts) == ("pre_compaction", 2)


def test_malformed_lines_are_counted_and_survive_a_rewrite_byte_for_byte(workspace):
    letters = FilesDeadLetterBox.of(workspace, OWNER)
    letters.append(record("I like tea."))
    broken = [
        b'{"tenant_id": "acme", "user_id": "alice", "messages": [',  # cut short
        json.dumps(
            {"tenant_id": "acme", "user_id": "bob", "messages": [{"role": "user"}]}
        ).encode(),
        b'{"tenant_id": "acme", "user_id": "alice", "messages": [{"role": "robot"}]}',
        b'{"version": 2, "tenant_id": "acme", "user_id": "alice", "messages": []}',
        b"\xff\xfe not UTF-8 at all \xc3",
        b'{"tenant_id": "acme", "user_id": "alice"}\r',  # CRLF: the \r is the line's
    ]
    with open(letters.path, "ab") as handle:
        handle.write(b"\n".join(broken) + b"\n")

    read = letters.read(OWNER)
    assert (len(read.letters), read.malformed) == (1, len(broken))
    letters.rewrite([(read.letters[0], None)])

    assert letters.path.read_bytes() == b"\n".join(broken) + b"\n"
    assert letters.read(OWNER).malformed == len(broken)


def test_a_line_appended_between_read_and_rewrite_survives(workspace):
    letters = FilesDeadLetterBox.of(workspace, OWNER)
    letters.append(record("I like tea."))
    read = letters.read(OWNER)

    letters.append(record("I moved to Porto.", ctx=OWNER.with_session("s2")))  # a flush, meanwhile
    letters.rewrite([(read.letters[0], None)])

    [kept] = letters.read(OWNER).letters
    assert kept.ctx.session_id == "s2"
    assert [m.content for m in kept.record.messages] == ["I moved to Porto."]


def test_a_rewrite_replaces_each_given_line_once_and_keeps_unknown_fields(workspace):
    letters = FilesDeadLetterBox.of(workspace, OWNER)
    twice = record("I like tea.")
    letters.append(twice)
    letters.append(twice)  # an identical copy is its own entry
    line = letters.read(OWNER).letters[0].line
    entry = {**json.loads(line), "note": "from a newer writer"}
    letters.path.write_bytes(letters.path.read_bytes() + json.dumps(entry).encode() + b"\n")
    first, second, noted = letters.read(OWNER).letters

    rest = first.record.messages[1:] or first.record.messages
    retried = first.record.after_replay_failure(rest, "NO_REPLY twice", AT)
    letters.rewrite([(first, retried), (noted, noted.record.after_replay_failure(rest, "e", AT))])

    lines = letters.path.read_bytes().split(b"\n")[:-1]
    assert lines[1] == second.line  # the untouched copy keeps its bytes
    updated = json.loads(lines[0])
    assert (updated["replay_attempts"], updated["last_replay_error"]) == (1, "NO_REPLY twice")
    assert updated["last_replay_at"] == AT.isoformat()
    assert json.loads(lines[2])["note"] == "from a newer writer"


def test_a_rewrite_after_the_file_is_gone_brings_nothing_back(workspace):
    letters = FilesDeadLetterBox.of(workspace, OWNER)
    letters.append(record("I like tea."))
    read = letters.read(OWNER)
    letters.path.unlink()  # the user was forgotten meanwhile

    letters.rewrite([(read.letters[0], None)])

    assert not letters.exists() and letters.read(OWNER).letters == []
