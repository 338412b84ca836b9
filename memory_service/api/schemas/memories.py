"""Bodies of the long-term memory routes: record, search, list, get, delete."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AliasPath, BeforeValidator, Field, model_validator

from memory_service.api.schemas.common import (
    AgentId,
    FilterTime,
    Out,
    SessionId,
    Strict,
    UserId,
    UtcTime,
    coded,
    max_bytes,
    no_nul,
)
from memory_service.config.retrieval import LEGS, Mode
from memory_service.domain.context import SCOPES, Scope
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, FactKind, Source, canonical_kind
from memory_service.domain.limits import (
    MAX_CONFIDENCE,
    MAX_FACT_TEXT_BYTES,
    MAX_FACTS_PER_RECORD,
    MAX_IMPORTANCE,
    MAX_KEY_CHARS,
    MAX_QUERY_BYTES,
    MAX_SOURCE_CHARS,
    MAX_SOURCE_MESSAGES,
    MAX_SOURCE_TEXT_BYTES,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_THRESHOLD,
    MAX_TOP_K,
    MIN_CONFIDENCE,
    MIN_IMPORTANCE,
    MIN_THRESHOLD,
)

FactText = Annotated[
    str,
    Field(min_length=1),
    AfterValidator(max_bytes(MAX_FACT_TEXT_BYTES, "fact_too_large")),
    AfterValidator(no_nul("fact text")),
]
Query = Annotated[
    str,
    Field(
        description=f"what to recall: text, at most {MAX_QUERY_BYTES} bytes of UTF-8",
        json_schema_extra={"minLength": 1},  # shown; the use case checks it (invalid_query)
    ),
]
Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS), AfterValidator(no_nul("a tag"))]
Key = Annotated[str, Field(min_length=1, max_length=MAX_KEY_CHARS), AfterValidator(no_nul("key"))]
FilterTag = Annotated[
    str,
    Field(min_length=1, max_length=MAX_TAG_CHARS),
    AfterValidator(no_nul("a tag", "invalid_filter")),
]
FilterKey = Annotated[
    str,
    Field(min_length=1, max_length=MAX_KEY_CHARS),
    AfterValidator(no_nul("key", "invalid_filter")),
]
Kind = Annotated[
    FactKind,
    BeforeValidator(canonical_kind),
    Field(
        description="fact, preference, event or procedure; the memory types episodic, "
        "factual, procedural and semantic are taken as event, fact, procedure and preference"
    ),
]
Scopes = Annotated[
    list[Scope],
    Field(
        min_length=1,
        max_length=len(SCOPES),
        description="the scopes to read (user, agent, tenant); default: the user's, the "
        "agent's when agent_id is given, and the tenant's",
    ),
]


def _limit(**shown: int) -> dict[str, int]:
    """A limit the schema shows but pydantic does not check: the service's check of it
    answers with the service's own code."""
    return shown


class SourceIn(Strict):
    """Where a fact came from: ``origin`` (a label such as ``chat`` or ``crm``), the session
    and the messages' sequence numbers in it, and what was said (``text``, at most
    ``MAX_SOURCE_TEXT_BYTES``; no NUL in it or the origin), which recall
    searches beside the fact. ``session_id`` must name one of the user's own sessions."""

    # The limits are Source.validate's, their one check (invalid_source, as the CLI, an import
    # and the memory tools answer): the schema only shows them.

    origin: Annotated[str, Field(json_schema_extra=_limit(maxLength=MAX_SOURCE_CHARS))] | None = (
        None
    )
    session_id: SessionId | None = None
    messages: Annotated[
        list[Annotated[int, Field(json_schema_extra=_limit(minimum=0))]],
        Field(json_schema_extra=_limit(maxItems=MAX_SOURCE_MESSAGES)),
    ] = []
    text: (
        Annotated[
            str, Field(min_length=1, json_schema_extra=_limit(maxLength=MAX_SOURCE_TEXT_BYTES))
        ]
        | None
    ) = None

    @model_validator(mode="after")
    def _as_the_service_checks(self) -> SourceIn:
        try:
            self.to_source().validate()
        except InvalidInputError as exc:
            raise coded(exc) from None
        return self

    def to_source(self) -> Source:
        return Source(self.origin, self.session_id, tuple(self.messages), self.text)


def _label_as_origin(value: object) -> object:
    """A plain string ``source`` (the field's form before provenance) is the origin label."""
    return {"origin": value} if isinstance(value, str) else value


class SourceOut(Out):  # a facts.Source
    """Where the fact came from (null fields: not known)."""

    origin: str | None
    session_id: str | None
    messages: list[int]
    text: str | None


class PhrasingOut(Out):  # a facts.Phrasing
    """Another wording of the fact, merged into it when it was recorded (its cosine to the
    fact reached ``MEMORY_LONGTERM__NEAR_DUPLICATE_COSINE`` and it changed no value): what was
    recorded, where it came from and when. Recall's lexical leg finds the fact by its words."""

    text: str
    source: SourceOut | None
    recorded_at: datetime | None


class FactIn(Strict):
    """One fact to record. ``confidence``: how sure the sender is, 1.0 (the default: a fact
    a person or a caller states) down to 0; it decays with the fact's age by its kind."""

    text: FactText
    key: Key | None = None
    kind: Kind = "fact"
    importance: Annotated[int, Field(ge=MIN_IMPORTANCE, le=MAX_IMPORTANCE)] = 5
    confidence: Annotated[float, Field(ge=MIN_CONFIDENCE, le=MAX_CONFIDENCE)] = 1.0
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = []
    source: Annotated[SourceIn | None, BeforeValidator(_label_as_origin)] = Field(
        None, description="provenance; a plain string is taken as the origin label"
    )
    expires_at: UtcTime | None = None
    scope: Scope = Field(
        "user",
        description="whose memory: the user's own (default), the agent's (the request's "
        "agent_id; shared by the agent's users) or the tenant's (shared by all its users); "
        "agent and tenant need a curator or admin key",
    )

    def to_fact(self, session_id: str | None) -> Fact:
        """The fact to record; id, hash and creation time are derived when it is."""
        fields = self.model_dump(exclude={"tags", "source"})
        source = self.source.to_source() if self.source is not None else None
        return Fact(**fields, tags=tuple(self.tags), source=source, session_id=session_id)


class RecordRequest(Strict):
    user_id: UserId
    session_id: SessionId | None = None
    agent_id: AgentId | None = None
    facts: Annotated[list[FactIn], Field(min_length=1, max_length=MAX_FACTS_PER_RECORD)]


class UpdateRequest(Strict):
    """New metadata for one fact: the fields sent replace the stored ones (``expires_at:
    null`` clears the expiry); text, key and id never change (a new text is a new fact). A
    new ``confidence`` restarts its decay (``updated_at`` becomes now)."""

    user_id: UserId
    kind: Kind | None = None
    importance: Annotated[int, Field(ge=MIN_IMPORTANCE, le=MAX_IMPORTANCE)] | None = None
    confidence: Annotated[float, Field(ge=MIN_CONFIDENCE, le=MAX_CONFIDENCE)] | None = None
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] | None = None
    expires_at: UtcTime | None = None

    def changes(self) -> dict[str, object]:
        """The fields sent, as ``usecases.memories.UpdateFact`` takes them (it refuses a null
        but for ``expires_at``)."""
        return {name: getattr(self, name) for name in self.model_fields_set - {"user_id"}}


class ConfirmRequest(Strict):
    """Whose fact to confirm: the user's own (default), or the agent's or the tenant's."""

    user_id: UserId
    agent_id: AgentId | None = None
    scope: Scope = Field(
        "user", description="whose memory the fact is in: user (default), agent or tenant"
    )


class RecordResultOut(Out):  # a facts.RecordResult
    """What recording one fact did. ``created``: stored and recalled from now on;
    ``duplicate``: already stored (the same text): confirmed (its ``updated_at`` becomes now,
    its confidence its initial one again), nothing else written but the ``source`` it
    brought when the stored fact had none; ``superseded``: its ``key`` is shared with
    another open fact, and the older of the two is hidden from recall: the others, when
    ``superseded_ids`` names them, or this fact itself, when it is empty (a newer fact already
    holds the key: a racing write lost; its ``superseded_by`` says which); ``merged``: a
    near-duplicate of the stored fact ``merged_into`` (``id`` names it too), which now keeps
    this text among its ``phrasings``, is confirmed, and takes the higher confidence."""

    id: str
    status: Literal["created", "duplicate", "superseded", "merged"] = Field(
        description="created | duplicate | superseded (with superseded_ids empty: this fact "
        "itself was recorded superseded by a newer fact with the same key, hidden from recall) "
        "| merged (into the near-duplicate merged_into)"
    )
    superseded_ids: list[str] = []
    merged_into: str | None = None
    redacted: dict[str, int] = Field(
        default_factory=dict,
        description="sensitive values replaced before the fact was stored, by kind (card, "
        "iban, national-id, secret); empty: none",
    )


class RecordResponse(Out):
    results: list[RecordResultOut]
    redacted: dict[str, int] = Field(
        default_factory=dict,
        description="the results' redactions summed by kind (MEMORY_PRIVACY__REDACTION)",
    )


Tags = Annotated[list[FilterTag], Field(max_length=MAX_TAGS)]


class FilterIn(Strict):
    """Narrows search and list (a ``fact_filter.FactFilter``), inside each retriever before
    top-k. ``kind``: any of these kinds; ``tags_any``: at least one of these tags;
    ``tags_all``: every one; ``min_importance``: at least this; ``key``: exactly this key;
    ``created_after`` (inclusive) / ``created_before`` (exclusive): the creation-time range;
    ``as_of``: what was valid at that past moment (facts superseded later are included, facts
    recorded later are not); ``needs_verification``: true, only facts whose decayed
    confidence is below the verification threshold (0.5); false, only the others. An unknown
    field is refused."""

    kind: list[Kind] = []
    tags_any: Tags = []
    tags_all: Tags = []
    min_importance: Annotated[int, Field(ge=MIN_IMPORTANCE, le=MAX_IMPORTANCE)] | None = None
    key: FilterKey | None = None
    created_after: FilterTime | None = None
    created_before: FilterTime | None = None
    as_of: FilterTime | None = None
    needs_verification: bool | None = None

    def to_filter(self) -> FactFilter:
        return FactFilter(
            kinds=tuple(self.kind),
            tags_any=tuple(self.tags_any),
            tags_all=tuple(self.tags_all),
            min_importance=self.min_importance,
            key=self.key,
            created_after=self.created_after,
            created_before=self.created_before,
            as_of=self.as_of,
            needs_verification=self.needs_verification,
        )


FILTER_FIELDS: tuple[str, ...] = tuple(FilterIn.model_fields)


class SearchRequest(Strict):
    user_id: UserId
    query: Query
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 5
    threshold: Annotated[float, Field(ge=MIN_THRESHOLD, le=MAX_THRESHOLD)] = 0.0
    mode: Mode = "hybrid"
    filter: FilterIn | None = None

    def fact_filter(self) -> FactFilter | None:
        return self.filter.to_filter() if self.filter is not None else None

    agent_id: AgentId | None = None
    scopes: Scopes | None = None


class FactOut(Out):  # a facts.Fact (its content_hash stays inside)
    """A stored fact; ``superseded_by``/``valid_to`` are set once a newer fact replaced it;
    ``access_count``/``last_accessed_at``: how often and when recall returned it.
    ``confidence`` is the initial one (its decayed value is on each search hit);
    ``updated_at``: when it was recorded or last confirmed, what its confidence decays from;
    ``needs_verification``: its decayed confidence is below the verification threshold now
    (confirm it, or record what is true instead); ``phrasings``: the near-duplicates merged
    into it when they were recorded."""

    id: str
    text: str
    key: str | None
    kind: str
    importance: int
    confidence: float
    tags: list[str]
    source: SourceOut | None
    session_id: str | None
    created_at: datetime | None
    updated_at: datetime | None = None
    expires_at: datetime | None
    superseded_by: str | None
    valid_to: datetime | None
    needs_verification: bool = False
    access_count: int = 0
    last_accessed_at: datetime | None = None
    scope: Scope
    agent_id: str | None
    phrasings: list[PhrasingOut] = []


def _every_leg(per_leg: Mapping[str, object]) -> dict[str, object]:
    """Each retrieval leg, null where the leg did not find the fact (or did not run)."""
    return {leg: per_leg.get(leg) for leg in LEGS}


def _of_fact(name: str) -> AliasPath:
    return AliasPath("fact", name)


class Hit(Out):  # a facts.Recall: its fact's fields, flat
    """A recalled fact and its fused ``score``; ``ranks`` says where each retriever placed it
    (1-based) and ``scores`` what it scored there (null: not found by that retriever).
    ``confidence``: the stored confidence decayed by the days since ``updated_at`` at the
    moment asked about, at its kind's rate (``MEMORY_LONGTERM__DECAY_EVENT`` and the like);
    ``needs_verification``: that is below the verification threshold;
    ``valid_to``: set when a newer fact replaced it (seen with ``filter.as_of``)."""

    id: str = Field(validation_alias=_of_fact("id"))
    text: str = Field(validation_alias=_of_fact("text"))
    score: float
    confidence: float
    needs_verification: bool = Field(validation_alias=_of_fact("needs_verification"))
    ranks: Annotated[dict[str, int | None], BeforeValidator(_every_leg)]
    scores: Annotated[dict[str, float | None], BeforeValidator(_every_leg)]
    key: str | None = Field(validation_alias=_of_fact("key"))
    kind: str = Field(validation_alias=_of_fact("kind"))
    importance: int = Field(validation_alias=_of_fact("importance"))
    tags: list[str] = Field(validation_alias=_of_fact("tags"))
    source: SourceOut | None = Field(validation_alias=_of_fact("source"))
    session_id: str | None = Field(validation_alias=_of_fact("session_id"))
    created_at: datetime | None = Field(validation_alias=_of_fact("created_at"))
    updated_at: datetime | None = Field(validation_alias=_of_fact("updated_at"))
    valid_to: datetime | None = Field(validation_alias=_of_fact("valid_to"))
    scope: Scope = Field(validation_alias=_of_fact("scope"))
    agent_id: str | None = Field(validation_alias=_of_fact("agent_id"))
    phrasings: list[PhrasingOut] = Field([], validation_alias=_of_fact("phrasings"))


class SearchResponse(Out):
    hits: list[Hit]


class FactPage(Out):  # a facts.Page
    """A page of facts; pass ``next_cursor`` back for the next one (null: the last)."""

    items: list[FactOut]
    next_cursor: str | None


class DeleteReceipt(Out):
    deleted: int
