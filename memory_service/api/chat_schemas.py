"""Bodies of ``POST /v1/chat`` and ``GET /v1/usage``: the reply and what memory did for it."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from memory_service.api.schemas import SessionId, Strict, UserId, max_bytes
from memory_service.api.session_schemas import CompactionOut

MAX_MESSAGE_BYTES = 64 * 1024

Message = Annotated[
    str,
    Field(min_length=1, description="what the user says"),
    AfterValidator(max_bytes(MAX_MESSAGE_BYTES)),
]


class ChatRequest(Strict):
    user_id: UserId
    session_id: SessionId
    message: Message


class TokenUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class RecalledOut(BaseModel):
    """A fact put into the prompt; ``via`` says why (``relevance`` or ``importance``)."""

    id: str
    text: str
    via: str
    importance: int
    kind: str
    score: float | None


class FlushedFactOut(BaseModel):
    id: str
    text: str
    status: str
    kind: str
    importance: int
    key: str | None


class FlushOut(BaseModel):
    """One flush: ``reason`` (post_call, pre_compaction, overflow) and its ``status``
    (flushed, no_reply, nothing_to_flush, skipped, failed)."""

    reason: str
    status: str
    facts: list[FlushedFactOut]
    through_seq: int | None
    messages: int
    attempts: int
    usage: TokenUsage
    detail: str | None
    error: str | None
    dead_letter: str | None


class MemoryMdOut(BaseModel):
    tokens: int
    total_tokens: int
    truncated: bool


class ToolCallOut(BaseModel):
    call_id: str
    name: str
    ok: bool
    error: str | None


class MemoryActivity(BaseModel):
    recalled: list[RecalledOut]
    memory_md: MemoryMdOut
    flushed_facts: list[FlushedFactOut]
    flushes: list[FlushOut]
    compaction: CompactionOut | None
    overflow_retry: bool
    tool_calls: list[ToolCallOut]
    evicted: list[str]


class ChatResponse(BaseModel):
    reply: str
    session_id: str
    version: int
    memory: MemoryActivity
    usage: dict[str, TokenUsage] = Field(description="tokens by purpose, and 'total'")
    iterations: int


class UsageRow(TokenUsage):
    calls: int


class UsageReport(BaseModel):
    """The tenant's LLM tokens by purpose (chat, flush, compaction) and pipeline counters."""

    tenant_id: str
    tokens: dict[str, UsageRow]
    total: UsageRow
    counters: dict[str, int]
    updated_at: str | None
