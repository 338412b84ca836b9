"""Typed request and response bodies. Limits live here, so OpenAPI documents them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memory_service.context import validate_id
from memory_service.facts import MAX_KEY_CHARS, MAX_TAG_CHARS, MAX_TAGS, MAX_TEXT_BYTES, Fact

MAX_FACTS_PER_REQUEST = 1000
MAX_QUERY_BYTES = 4096


def max_bytes(limit: int):
    def check(value: str) -> str:
        if len(value.encode("utf-8")) > limit:
            raise ValueError(f"must be at most {limit} bytes of UTF-8")
        return value

    return check


def _id_of(what: str):
    def check(value: str) -> str:
        validate_id(value, what)
        return value

    return check


UserId = Annotated[str, AfterValidator(_id_of("user_id"))]
SessionId = Annotated[str, AfterValidator(_id_of("session_id"))]
FactText = Annotated[str, Field(min_length=1), AfterValidator(max_bytes(MAX_TEXT_BYTES))]
Query = Annotated[str, Field(min_length=1), AfterValidator(max_bytes(MAX_QUERY_BYTES))]
Kind = Literal["fact", "preference", "event", "procedure"]
Mode = Literal["hybrid", "bm25", "dense"]


class Strict(BaseModel):
    """Unknown fields are refused: a typo (or a ``tenant_id``) is a 422, not ignored."""

    model_config = ConfigDict(extra="forbid")


class FactIn(Strict):
    text: FactText
    key: Annotated[str, Field(min_length=1, max_length=MAX_KEY_CHARS)] | None = None
    kind: Kind = "fact"
    importance: Annotated[int, Field(ge=1, le=10)] = 5
    confidence: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    tags: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS)]],
        Field(max_length=MAX_TAGS),
    ] = []
    source: Annotated[str, Field(max_length=256)] | None = None
    expires_at: datetime | None = None

    def to_fact(self, session_id: str | None) -> Fact:
        return Fact(
            text=self.text,
            key=self.key,
            kind=self.kind,
            importance=self.importance,
            confidence=self.confidence,
            tags=tuple(self.tags),
            source=self.source,
            session_id=session_id,
            expires_at=self.expires_at,
        )


class RecordRequest(Strict):
    user_id: UserId
    session_id: SessionId | None = None
    facts: Annotated[list[FactIn], Field(min_length=1, max_length=MAX_FACTS_PER_REQUEST)]


class RecordResultOut(BaseModel):
    id: str
    status: Literal["created", "duplicate", "superseded"]
    superseded_ids: list[str] = []


class RecordResponse(BaseModel):
    results: list[RecordResultOut]


class SearchRequest(Strict):
    user_id: UserId
    query: Query
    top_k: Annotated[int, Field(ge=1, le=100)] = 5
    threshold: Annotated[float, Field(ge=-1.0, le=1.0)] = 0.0
    mode: Mode = "hybrid"


class FactOut(BaseModel):
    id: str
    text: str
    key: str | None
    kind: str
    importance: int
    confidence: float
    tags: list[str]
    source: str | None
    session_id: str | None
    created_at: datetime | None
    expires_at: datetime | None
    superseded_by: str | None
    valid_to: datetime | None

    @classmethod
    def of(cls, fact: Fact) -> FactOut:
        return cls(
            id=fact.id,
            text=fact.text,
            key=fact.key,
            kind=fact.kind,
            importance=fact.importance,
            confidence=fact.confidence,
            tags=list(fact.tags),
            source=fact.source,
            session_id=fact.session_id,
            created_at=fact.created_at,
            expires_at=fact.expires_at,
            superseded_by=fact.superseded_by,
            valid_to=fact.valid_to,
        )


class Hit(BaseModel):
    """A recalled fact. ``ranks`` says where each retriever placed it (null: not found by it)."""

    id: str
    text: str
    score: float
    ranks: dict[str, int | None]
    scores: dict[str, float | None]
    key: str | None
    kind: str
    importance: int
    tags: list[str]
    created_at: datetime | None


class SearchResponse(BaseModel):
    hits: list[Hit]


class FactPage(BaseModel):
    items: list[FactOut]
    next_cursor: str | None


class DeleteReceipt(BaseModel):
    deleted: int


class Health(BaseModel):
    status: Literal["ok"]
    backend: str
    version: str


class ExportQuery(Strict):
    """The query of ``GET /v1/export``. There is no ``tenant_id``: the export is always the
    key's tenant's, and one sent anyway is a 422."""

    user_id: UserId | None = Field(None, description="only this user; omitted: every user")


class ImportSummary(BaseModel):
    """What an import did: every line is counted under exactly one status."""

    lines: int = Field(description="facts read (blank lines are skipped)")
    created: int = Field(description="facts new to this tenant")
    superseded: int = Field(description="facts recorded that replaced an active fact's key")
    duplicate: int = Field(description="facts already stored: importing twice changes nothing")
