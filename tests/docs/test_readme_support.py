"""The rules ``tests/docs/test_readme.py`` reads README.md by (``tests.support.readme``): which
blocks run, which block is each one's answer, and what a comparison masks. No processes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from memory_service.domain.facts import content_hash, fact_id
from tests.support.readme import (
    Bindings,
    blocks,
    commands,
    examples,
    json_values,
    match_json,
    match_text,
    placeholders,
)

README = Path(__file__).resolve().parents[2] / "README.md"

SAMPLE = """Intro.

```bash
curl -s localhost:8080/x -H "Authorization: Bearer $KEY"
```
```json
{"id": "35f6c5d4-a0be-565c-8704-7460a6ef5ada", "score": 1.5}
```

```bash no-run
make serve
```

```bash
KEY=msk_dev_...
```

Text between.

```json
{"not": "an answer"}
```

```console
$ memory-service keys list \\
    --json
[]
$ echo hi
hi
```
"""


def test_which_blocks_run_and_which_block_is_each_ones_answer():
    found = examples(SAMPLE)
    assert [(e.block.lang, e.block.line) for e in found] == [
        ("bash", 3),
        ("bash", 14),
        ("console", 24),
    ]
    assert json_values(found[0].expected.text)[0]["score"] == 1.5
    assert found[1].expected is None  # prose between: that json block is an illustration
    assert [b.lang for b in blocks(SAMPLE)] == ["bash", "json", "bash", "bash", "json", "console"]


def test_a_transcript_is_commands_and_what_each_prints():
    console = examples(SAMPLE)[2].block.text
    assert commands(console) == [
        ("memory-service keys list \\\n    --json", "[]"),
        ("echo hi", "hi"),
    ]


def test_readme_runs_its_examples():
    """Every shell, transcript and Python block of README runs unless marked ``no-run``, and
    the ones that show answers are most of them."""
    found = examples(README.read_text(encoding="utf-8"))
    assert {e.block.lang for e in found} == {"bash", "console", "python"}
    assert sum(e.expected is not None or e.block.lang == "console" for e in found) >= 8


def test_ids_keys_and_hex_tokens_stand_for_one_value_each():
    bindings = Bindings()
    uuid_a, uuid_b = "35f6c5d4-a0be-465c-8704-7460a6ef5ada", "c1d0d8c6-5000-454c-8be8-d07be20aea0c"
    real_a, real_b = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-000000000000"
    assert match_json({"id": uuid_a}, {"id": real_a}, bindings) is None
    assert match_json({"ids": [uuid_a]}, {"ids": [real_a]}, bindings) is None
    assert "stood for" in match_json({"id": uuid_a}, {"id": real_b}, bindings)
    assert "was shown as" in match_json({"id": uuid_b}, {"id": real_a}, bindings)
    assert bindings.substitute(f"keys revoke {uuid_a}") == f"keys revoke {real_a}"


def test_a_derived_id_is_shown_as_the_service_derives_it():
    """A fact's id is the same in every run (a UUID5 of tenant, owner and text): README may
    not show one the service cannot produce, though the masked comparison takes any random
    id for any other."""
    shown = fact_id("default", "alice", content_hash("Alice is allergic to peanuts"))
    assert match_json({"id": shown}, {"id": shown}, Bindings()) is None
    other = fact_id("default", "alice", content_hash("Alice is allergic to walnuts"))
    assert "derived" in match_json({"id": shown}, {"id": other}, Bindings())
    assert "derived" in match_text(f"created {shown}", f"created {other}", Bindings())


def test_scores_and_times_are_any_value_of_their_kind_and_the_rest_is_exact():
    bindings = Bindings()
    shown = {"score": 4.0, "rank": 1, "at": "2026-12-01T09:39:14.117782Z", "text": "peanuts"}
    assert (
        match_json(shown, {**shown, "score": 0.25, "at": "2027-01-02T03:04:05Z"}, bindings) is None
    )
    assert match_json(shown, {**shown, "rank": 2}, bindings) is not None
    assert match_json(shown, {**shown, "text": "walnuts"}, bindings) is not None
    assert match_json(shown, {**shown, "at": "yesterday"}, bindings) is not None
    assert "fields" in match_json(shown, {**shown, "extra": None}, bindings)
    assert match_json({"v": None}, {"v": 0.0}, bindings) is not None  # null is no score


def test_text_masks_and_keeps_what_the_command_names():
    bindings = Bindings()
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    shown = f"traceparent: 00-{trace}-5c1f3ad0e9b2a411-01"
    command = f"curl -H 'traceparent: 00-{trace}-00f067aa0ba902b7-01'"
    printed = f"traceparent: 00-{trace}-78bdf76e3a092246-01"
    assert match_text(shown, printed, bindings, literal=command) is None
    other = f"traceparent: 00-{'0' * 31}1-78bdf76e3a092246-01"
    assert match_text(shown, other, bindings, literal=command) is not None
    table = "39ffc235818e  acme     user     2026-12-01T09:39:26.148887+00:00  sha256"
    assert (
        match_text(table, "0123456789ab  acme  user  2026-12-03T06:41:38+00:00  sha256", bindings)
        is None
    )


def test_the_port_and_the_key_are_the_test_servers():
    text = 'KEY=msk_dev_...\ncurl localhost:8080/x\nClient("http://127.0.0.1:8080", "msk_...")'
    assert placeholders(text, 4321, "msk_dev_abc") == (
        'KEY=msk_dev_abc\ncurl localhost:4321/x\nClient("http://127.0.0.1:4321", "msk_dev_abc")'
    )


def test_a_key_named_after_a_user_is_that_users_personal_key():
    """A shell variable named after one of README's users holds that user's personal key,
    never a tenant-wide one a reader would take for it."""
    text = README.read_text(encoding="utf-8")
    users = set(re.findall(r'"user_id":\s*"(\w+)"', text)) | set(re.findall(r"--user (\w+)", text))
    added = re.findall(r"(\w+)=\$\(memory-service keys add ([^)]*)\)", text)
    assert added, "README shows keys added into shell variables"
    for name, args in added:
        if name.lower() in users:
            assert f"--user {name.lower()}" in args, (name, args)


def test_no_document_outside_the_repository_is_cited_by_file_name():
    """A decision taken from a design document is said in the project's own words
    (docs/decisions.md); a reader cannot open a file the repository does not hold."""
    repo = README.parent
    cited = re.compile(r"\b\d{3}_[0-9a-f]{16}\.txt\b")
    tracked = subprocess.run(
        ["git", "ls-files", "*.md", "*.py", "*.toml", "Makefile"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "README.md" in tracked
    found = [
        f"{name}: {hit}"
        for name in tracked
        if (path := repo / name).is_file()
        for hit in cited.findall(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert "(docs/decisions.md)" in README.read_text(encoding="utf-8")
