"""The summary a compaction writes: the summariser's prompt, its transcript lines, and the
five-block reply parsed and rendered back into the conversation.

Kept apart from the policies (``compaction``) because it is the text contract with the LLM:
what it is asked, how its answer is read, and what the assistant later sees of it.
"""

from __future__ import annotations

import re

from memory_service.llm import LlmBadResponseError
from memory_service.messages import Msg

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
_BLOCK_HEADING = re.compile(
    r"^#{1,6}\s*\**(" + "|".join(SUMMARY_BLOCKS) + r")\**\s*:?\s*$", re.MULTILINE | re.IGNORECASE
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
    """The five blocks from a reply (XML tags, or Markdown headings as a fallback). A reply
    with none of them is malformed; a missing block is recorded as ``(none)``."""
    found = {name: body.strip() for name, body in _BLOCK_TAG.findall(text or "")}
    if not found:
        headings = list(_BLOCK_HEADING.finditer(text or ""))
        for i, match in enumerate(headings):
            end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
            found[match.group(1).lower()] = text[match.end() : end].strip()
    if not found:
        raise LlmBadResponseError(
            "the summary reply has none of the blocks " + ", ".join(SUMMARY_BLOCKS)
        )
    return {name: found.get(name) or EMPTY_BLOCK for name in SUMMARY_BLOCKS}


def render_summary(blocks: dict[str, str], number: int) -> str:
    body = "\n".join(
        f"<{name}>\n{blocks.get(name) or EMPTY_BLOCK}\n</{name}>" for name in SUMMARY_BLOCKS
    )
    return (
        f'<conversation_summary compaction="{number}">\n'
        "Earlier messages of this conversation were compacted into this summary.\n"
        f"{body}\n</conversation_summary>"
    )
