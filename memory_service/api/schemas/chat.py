"""Bodies of ``POST /v1/chat``: the reply, and what memory did for it (a ``ChatOutcome``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, AliasPath, BeforeValidator, Field, model_validator

from memory_service.api.schemas.common import (
    AgentId,
    Merged,
    Out,
    SessionId,
    Strict,
    TokenUsage,
    UserId,
    max_bytes,
    no_nul,
)
from memory_service.api.schemas.sessions import CompactionOut, FlushedFactOut, FlushOut
from memory_service.domain.limits import MAX_CHAT_MESSAGE_BYTES
from memory_service.llm import Usage

if TYPE_CHECKING:
    from memory_service.pipeline.flush_result import FlushedFact, FlushResult

Message = Annotated[
    str,
    Field(min_length=1, description="what the user says"),
    AfterValidator(max_bytes(MAX_CHAT_MESSAGE_BYTES, "message_too_large")),
    AfterValidator(no_nul("message")),
]


class ChatRequest(Strict):
    user_id: UserId
    session_id: SessionId
    message: Message
    agent_id: AgentId | None = Field(
        None, description="the agent answering: its shared memory is recalled too"
    )


class RecalledOut(Out):  # a harness.RecalledFact
    """A fact put into the prompt; ``via`` says why (``relevance`` or ``importance``);
    ``needs_verification``: it was marked for the agent to check with the user."""

    id: str
    text: str
    via: str
    importance: int
    kind: str
    score: float | None
    needs_verification: bool = False


class MemoryMdOut(Out):  # a harness.MemoryPrompt's memory_md_* fields
    """MEMORY.md's share of the system prompt: ``tokens`` shown of ``total_tokens``."""

    tokens: int = Field(validation_alias="memory_md_tokens")
    total_tokens: int = Field(validation_alias="memory_md_total_tokens")
    truncated: bool = Field(validation_alias="memory_md_truncated")


class ToolCallOut(Out):  # a tools.ToolOutcome
    """A memory tool call the model made; ``ok`` false with the ``error`` code: refused."""

    call_id: str
    name: str
    ok: bool
    error: str | None = Field(validation_alias="error_code")


def _facts_of(flushes: Sequence[FlushResult | Mapping[str, Any]]) -> list[FlushedFact | Any]:
    """The facts of every flush: of ``FlushResult``s, or of their JSON (the client's)."""
    return [
        fact
        for flush in flushes
        for fact in (flush["facts"] if isinstance(flush, Mapping) else flush.facts)
    ]


class MemoryActivity(Out):  # read from the harness.ChatOutcome itself
    """What memory did for the reply: facts recalled into the prompt, MEMORY.md's share, the
    flushes and the facts they recorded, compaction, tool calls and evicted tool results."""

    recalled: list[RecalledOut] = Field(validation_alias=AliasPath("prompt", "recalled"))
    memory_md: MemoryMdOut = Field(validation_alias="prompt")
    flushed_facts: Annotated[list[FlushedFactOut], BeforeValidator(_facts_of)] = Field(
        validation_alias="flushes"
    )
    flushes: list[FlushOut]
    compaction: CompactionOut | None
    overflow_retry: bool
    tool_calls: list[ToolCallOut]
    evicted: list[str]


def _with_total(usage: Mapping[str, Any]) -> dict[str, Any]:
    """Tokens by purpose and their total (already there in the JSON the client reads)."""
    if "total" in usage:
        return dict(usage)
    return {**usage, "total": sum(usage.values(), Usage())}


class ChatResponse(Out):  # ChatResponse.model_validate(a harness.ChatOutcome)
    """The assistant's reply, the session's new version, and what memory did for it."""

    reply: str
    session_id: str
    version: int
    memory: MemoryActivity
    usage: Annotated[dict[str, TokenUsage], BeforeValidator(_with_total)] = Field(
        description="tokens by purpose, and 'total'"
    )
    iterations: int

    @model_validator(mode="before")
    @classmethod
    def _memory_is_the_outcome(cls, data: Any) -> Any:
        """``memory`` groups attributes of the outcome itself."""
        return data if isinstance(data, Mapping) else Merged(data, memory=data)
