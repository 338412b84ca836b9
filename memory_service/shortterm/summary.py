"""The summary a compaction writes: the summariser's prompt, its transcript lines, and the
five-block reply parsed and rendered back into the conversation.

Kept apart from the policies (``compaction``) because it is the text contract with the LLM:
what it is asked, how its answer is read, and what the assistant later sees of it.
"""

from __future__ import annotations

import json
import re

from memory_service.domain.messages import Msg
from memory_service.llm import LlmBadResponseError

SUMMARY_BLOCKS: tuple[str, ...] = (
    "task_overview",
    "current_state",
    "important_discoveries",
    "next_steps",
    "context_to_preserve",
)

DEFAULT_SUMMARY_PROMPT = """\
You compact the working memory of an AI assistant. The conversation so far is too long to keep
verbatim; you write the summary that will replace its older part. The assistant will continue
from your summary plus the latest messages, so keep everything it needs and nothing it doesn't.

Answer with exactly these five blocks, each inside its XML tag, and nothing else:
<task_overview>What the user wants overall: goals, requirements, constraints.</task_overview>
<current_state>What has been done and where things stand now.</current_state>
<important_discoveries>Facts learned, decisions made with their reasons, errors met and how
they were solved, results of tool calls that still matter.</important_discoveries>
<next_steps>What remains to be done, in order; open questions.</next_steps>
<context_to_preserve>User preferences, names, numbers, identifiers, file paths, commitments:
details that must survive verbatim.</context_to_preserve>

If a previous summary is given, merge it: keep what still holds, drop what is obsolete.
Write in the language of the conversation. Be specific and concise."""

_BLOCK_TAG = re.compile(r"<(" + "|".join(SUMMARY_BLOCKS) + r")>\s*(.*?)\s*</\1>", re.DOTALL)
# a block's name as models write it: task_overview, Task overview, TASK-OVERVIEW, ...
_NAME = "|".join(r"[ \t_-]*".join(name.split("_")) for name in SUMMARY_BLOCKS)
# a line that opens a block: "## Task overview", "**Task overview:** ...", "- next_steps: ..."
_LABEL_LINE = re.compile(
    r"^[ \t]*(?:[-*+][ \t]+)?(?P<hashes>#{1,6}[ \t]*)?(?P<bold>\*\*|__)?[ \t]*"
    rf"(?P<name>{_NAME})[ \t]*(?P<colon>:)?[ \t]*(?P<closed>(?P=bold))?[ \t]*(?P<colon2>:)?"
    r"[ \t]*(?P<rest>.*?)[ \t]*$",
    re.IGNORECASE,
)
EMPTY_BLOCK = "(none)"


def render_line(message: Msg, max_chars: int) -> str:
    """One transcript line for the summariser; long contents are cut in the middle."""
    text = message.content
    if len(text) > max_chars:
        half = max_chars // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
    if message.role == "tool":
        label = f"[tool result {message.tool_call_id}]"
    elif message.mark == "hint":
        label = "[hint]"
    else:
        label = f"[{message.role}]"
    calls = "".join(
        f"\n[{message.role} calls {c.name}({c.arguments[:max_chars]}) id={c.id}]"
        for c in message.tool_calls
    )
    return f"{label} {text}{calls}".rstrip()


def parse_summary(text: str) -> dict[str, str]:
    """The five blocks from a reply, in the shapes models write them: XML tags (as asked), a
    JSON object, or lines that open each block (a Markdown heading, a bold name, or
    ``name: text``). A reply with none of them is malformed; a missing block is ``(none)``."""
    text = text or ""
    found = {name: body.strip() for name, body in _BLOCK_TAG.findall(text)}
    if not found:
        found = _from_json(text)
    if not found:
        found = _from_lines(text)
    if not found:
        raise LlmBadResponseError(
            "the summary reply has none of the blocks " + ", ".join(SUMMARY_BLOCKS)
        )
    return {name: found.get(name) or EMPTY_BLOCK for name in SUMMARY_BLOCKS}


def _block_name(label: str) -> str | None:
    name = re.sub(r"[\s_-]+", "_", label.strip().strip("*_#:").strip().lower())
    return name if name in SUMMARY_BLOCKS else None


def _from_json(text: str) -> dict[str, str]:
    """The blocks of a JSON object (maybe inside a code fence or a sentence)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    found = {}
    for key, body in value.items():
        name = _block_name(str(key))
        if name is not None:
            found[name] = _json_text(body).strip()
    return found


def _json_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(f"- {_json_text(item)}" for item in value)
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_json_text(item)}" for key, item in value.items())
    return json.dumps(value)


def _opens_block(line: str) -> tuple[str, str] | None:
    """``(block, text on the same line)`` when ``line`` opens a block. A bare name counts
    only alone on its line; otherwise a heading, bold or a colon must mark it as a label."""
    match = _LABEL_LINE.match(line)
    if match is None:
        return None
    marked = any(match.group(g) for g in ("hashes", "bold", "colon", "colon2"))
    if not marked and match.group("rest"):
        return None
    name = _block_name(match.group("name"))
    return (name, match.group("rest")) if name is not None else None


def _from_lines(text: str) -> dict[str, str]:
    """Blocks opened by label lines; each runs to the next one (text before the first is
    the model's preamble, dropped). A block written twice keeps both parts."""
    bodies: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        opened = _opens_block(line)
        if opened is not None:
            name, rest = opened
            current = bodies.setdefault(name, [])
            if rest:
                current.append(rest)
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in bodies.items()}


def render_summary(blocks: dict[str, str], number: int) -> str:
    body = "\n".join(
        f"<{name}>\n{blocks.get(name) or EMPTY_BLOCK}\n</{name}>" for name in SUMMARY_BLOCKS
    )
    return (
        f'<conversation_summary compaction="{number}">\n'
        "Earlier messages of this conversation were compacted into this summary.\n"
        f"{body}\n</conversation_summary>"
    )
