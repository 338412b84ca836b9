"""Fact, Recall, RecordResult, Page: the values long-term memory stores and returns."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Literal

from indexing.hashing import content_hash
from memory_service.domain.characters import CONTROL_RE, check_text
from memory_service.domain.context import RuntimeContext, validate_id
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.limits import (
    MAX_CLOCK_SKEW_S,
    MAX_CONFIDENCE,
    MAX_FACT_TEXT_BYTES,
    MAX_IMPORTANCE,
    MAX_KEY_CHARS,
    MAX_PHRASINGS,
    MAX_SOURCE_CHARS,
    MAX_SOURCE_MESSAGES,
    MAX_SOURCE_TEXT_BYTES,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MIN_CONFIDENCE,
    MIN_IMPORTANCE,
)

FactKind = Literal["fact", "preference", "event", "procedure"]
FACT_KINDS: tuple[str, ...] = ("fact", "preference", "event", "procedure")
# The designs' memory types (docs/decisions.md), accepted on input as names of these kinds:
# an episode is an event, a factual memory a fact, a procedural one a procedure, and semantic
# memory (stable knowledge that holds until replaced) a preference.
KIND_ALIASES: dict[str, str] = {
    "episodic": "event",
    "factual": "fact",
    "procedural": "procedure",
    "semantic": "preference",
}
RecordStatus = Literal["created", "duplicate", "superseded", "merged"]
# the times a caller may set
TIME_FIELDS: tuple[str, ...] = ("created_at", "updated_at", "expires_at", "valid_to")


# Fixed namespace: fact ids must be the same in every backend and every process.
FACT_NAMESPACE = uuid.UUID("6f1b8d0e-2f53-5c1e-9a53-6d656d6f7279")


def utcnow() -> datetime:
    return datetime.now(UTC)


def canonical_kind(kind: object) -> object:
    """``kind`` as stored: one of ``FACT_KINDS``, or the kind a ``KIND_ALIASES`` name stands
    for; anything else is returned as given, for ``Fact.validate`` to refuse."""
    if isinstance(kind, str):
        return KIND_ALIASES.get(kind.strip().lower(), kind)
    return kind


def kind_error(kind: object) -> str:
    """Why ``kind`` is not one, naming the kinds and their aliases."""
    aliases = ", ".join(f"{a} ({k})" for a, k in KIND_ALIASES.items())
    return f"kind must be one of {', '.join(FACT_KINDS)} or an alias: {aliases}; not {kind!r}"


def fact_id(tenant_id: str, owner: str, text_hash: str) -> str:
    """``uuid5(tenant, owner, content_hash)``: the same fact of the same owner has one id.
    ``owner`` is ``RuntimeContext.owner``: the user id for a user's fact (so ids recorded
    before scopes existed stay), a marker for an agent's or the tenant's."""
    return str(uuid.uuid5(FACT_NAMESPACE, f"{tenant_id}\x1f{owner}\x1f{text_hash}"))


def clip_source_text(text: str, limit: int = MAX_SOURCE_TEXT_BYTES) -> str:
    """``text`` with whitespace runs made single spaces, cut at a word boundary to at most
    ``limit`` UTF-8 bytes: what producers (the flush, ``memory_save``, the benchmarks) store,
    so a long message never makes a fact's source refused."""
    flat = " ".join(CONTROL_RE.sub(" ", text).split())
    if len(flat.encode("utf-8")) <= limit:
        return flat
    cut = flat.encode("utf-8")[: limit + 1].decode("utf-8", errors="ignore")
    head = cut[: cut.rfind(" ")] if " " in cut else cut[:-1]
    while len(head.encode("utf-8")) > limit:
        head = head[:-1]
    return head.rstrip()


# the origins the service itself gives a source whose text is a user's message (the flush, the
# memory_save tool): such text is a user's words even where no session is named
USER_ORIGINS: tuple[str, ...] = ("flush", "memory_save")


# A fact text may end with a data tail: a line break, this control character (the ASCII record
# separator), then data that is stored and read back with the fact but neither embedded nor
# indexed, so a caller that keeps structured data with a fact (the LangGraph store keeps the
# item) chooses which words are searched.
DATA_TAIL = "\n\x1e"


def searchable(text: str) -> str:
    """``text`` without its data tail (``DATA_TAIL``): what retrieval indexes and embeds."""
    return text.split(DATA_TAIL, 1)[0]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a fact came from: personal data, stored, recalled and deleted with the fact.

    ``origin`` is how it came in (``flush``, ``memory_save``, or a caller's label, which is
    what a plain string ``source`` becomes); ``session_id`` and ``messages`` (the
    messages' sequence numbers in that session) say which conversation; ``text`` is what was
    said there (at most ``MAX_SOURCE_TEXT_BYTES``), which the lexical leg indexes beside the
    fact."""

    origin: str | None = None
    session_id: str | None = None
    messages: tuple[int, ...] = ()
    text: str | None = None

    def validate(self) -> Source:
        """Raise ``InvalidInputError`` (code ``invalid_source``) naming the first problem."""
        if self.origin is not None:
            if not self.origin.strip() or len(self.origin) > MAX_SOURCE_CHARS:
                raise _bad_source(f"source origin must be 1-{MAX_SOURCE_CHARS} characters")
            check_text(self.origin, "source origin", "invalid_source")
        if self.session_id is not None:
            try:
                validate_id(self.session_id, "source session_id")
            except InvalidInputError as exc:
                raise _bad_source(exc.message) from None
        if len(self.messages) > MAX_SOURCE_MESSAGES or any(
            isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in self.messages
        ):
            raise _bad_source(
                f"source messages must be at most {MAX_SOURCE_MESSAGES} sequence numbers >= 0"
            )
        if self.text is not None:
            if len(self.text.encode("utf-8")) > MAX_SOURCE_TEXT_BYTES:
                raise _bad_source(f"source text is over {MAX_SOURCE_TEXT_BYTES} bytes")
            check_text(self.text, "source text", "invalid_source")
        return self

    @property
    def quotes_a_user(self) -> bool:
        """Whether ``text`` is what a user said: it names a session (a user's conversation)
        or came from the service's own pipeline (``USER_ORIGINS``). A source a curator writes
        for a shared fact with neither (a document's words, ``origin`` ``handbook``) does not."""
        return self.text is not None and (
            self.session_id is not None or self.origin in USER_ORIGINS
        )

    def for_shared_scope(self) -> Source | None:
        """This source as an agent's or the tenant's memory keeps it: without a user's words
        (``quotes_a_user``), the rest (origin, session, message numbers) kept; None if that
        leaves nothing."""
        if not self.quotes_a_user:
            return self
        kept = replace(self, text=None)
        return None if kept.is_empty() else kept

    def is_empty(self) -> bool:
        return (
            self.origin is None
            and self.session_id is None
            and not self.messages
            and not (self.text)
        )

    def to_dict(self) -> dict:
        return {
            "origin": self.origin,
            "session_id": self.session_id,
            "messages": list(self.messages),
            "text": self.text,
        }

    @classmethod
    def coerce(cls, value: object) -> Source | None:
        """A ``Source`` from what is stored or sent: a ``Source``, its dict, or a plain string
        (an old ledger's or export's ``source``: the origin label); None stays None."""
        if value is None or isinstance(value, Source):
            return value
        if isinstance(value, str):
            return cls(origin=value) if value else None
        if isinstance(value, dict):
            messages = value.get("messages") or ()
            if not isinstance(messages, list | tuple):
                raise _bad_source("source messages must be a list of sequence numbers")
            found = cls(
                origin=_opt_str(value.get("origin"), "origin"),
                session_id=_opt_str(value.get("session_id"), "session_id"),
                messages=tuple(messages),
                text=_opt_str(value.get("text"), "text"),
            )
            return None if found.is_empty() else found
        raise _bad_source("source must be an object (or a string label)")


def _opt_str(value: object, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise _bad_source(f"source {name} must be a string")


def _bad_source(message: str) -> InvalidInputError:
    return InvalidInputError(message, code="invalid_source")


@dataclass(frozen=True, slots=True)
class Phrasing:
    """Another wording of a fact, merged into it when it was recorded (a near-duplicate,
    ``longterm.near_duplicates``): what was recorded, where it came from and when, kept with
    the fact so nothing anyone said is lost, and indexed by the lexical leg beside its text."""

    text: str
    source: Source | None = None
    recorded_at: datetime | None = None

    def validate(self) -> Phrasing:
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidInputError("a phrasing's text must not be empty", code="invalid_fact")
        if len(self.text.encode("utf-8")) > MAX_FACT_TEXT_BYTES:
            raise InvalidInputError(
                f"a phrasing's text is over {MAX_FACT_TEXT_BYTES} bytes", code="fact_too_large"
            )
        check_text(self.text, "phrasing text", "invalid_fact")
        if self.source is not None:
            self.source.validate()
        parse_time(self.recorded_at, "phrasings.recorded_at")
        return self

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "source": self.source.to_dict() if self.source is not None else None,
            "recorded_at": iso_time(self.recorded_at),
        }

    @classmethod
    def coerce(cls, value: object) -> Phrasing:
        """A ``Phrasing`` from what is stored or sent: itself, or its dict."""
        if isinstance(value, Phrasing):
            return value
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            return cls(
                text=value["text"],
                source=Source.coerce(value.get("source")),
                recorded_at=parse_time(value.get("recorded_at"), "phrasings.recorded_at"),
            )
        raise InvalidInputError("each phrasing must be an object with a text", code="invalid_fact")


@dataclass(frozen=True, slots=True)
class Fact:
    """One long-term memory. ``id`` and ``content_hash`` are derived when it is recorded.

    ``confidence`` is the initial one (1.0: recorded by a person or a caller; the flush's
    are lower), never decayed in storage; ``updated_at`` is when it was recorded or last
    confirmed (``ConfidenceDecay`` ages it from there; a fact stored without one reads as
    updated when it was created). ``needs_verification`` is set on each read, never stored:
    its decayed confidence is below the memory's verification threshold. ``phrasings``: the
    near-duplicates merged into it when they were recorded (at most ``MAX_PHRASINGS``)."""

    text: str
    key: str | None = None
    kind: str = "fact"
    importance: int = 5
    confidence: float = 1.0
    tags: tuple[str, ...] = ()
    source: Source | None = None  # a plain string is taken as the origin label
    session_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    superseded_by: str | None = None
    valid_to: datetime | None = None
    id: str = ""
    content_hash: str = ""
    access_count: int = 0  # times recalled (batched: see longterm.access)
    last_accessed_at: datetime | None = None
    scope: str | None = None  # None: the recording context's; set on every stored fact
    agent_id: str | None = None  # the agent whose fact it is (agent scope only)
    needs_verification: bool = False  # set by each read (see above), never stored
    phrasings: tuple[Phrasing, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.source, Source | None):
            object.__setattr__(self, "source", Source.coerce(self.source))
        if any(not isinstance(p, Phrasing) for p in self.phrasings):
            phrasings = tuple(Phrasing.coerce(p) for p in self.phrasings)
            object.__setattr__(self, "phrasings", phrasings)
        if self.kind not in FACT_KINDS:
            object.__setattr__(self, "kind", canonical_kind(self.kind))

    @property
    def last_updated(self) -> datetime | None:
        """When it was recorded or last confirmed: what its confidence decays from."""
        return parse_time(self.updated_at) or parse_time(self.created_at)

    @property
    def source_text(self) -> str:
        """What the lexical leg indexes beside the fact's words as their sources: its source
        text and those of its phrasings ("" without any)."""
        texts = [s.text for s in (self.source, *(p.source for p in self.phrasings)) if s]
        return "\n".join(t for t in texts if t)

    @property
    def searchable_text(self) -> str:
        """The text the dense leg embeds: all of it but its data tail (``searchable``)."""
        return searchable(self.text)

    @property
    def indexed_text(self) -> str:
        """The fact's words as the lexical leg indexes them: its searchable text and its
        phrasings'."""
        if not self.phrasings:
            return self.searchable_text
        return "\n".join([self.searchable_text, *(p.text for p in self.phrasings)])

    def validate(self) -> Fact:
        """Raise ``InvalidInputError`` naming the first problem; return self when valid."""
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidInputError("fact text must not be empty", code="invalid_fact")
        if len(self.text.encode("utf-8")) > MAX_FACT_TEXT_BYTES:
            raise InvalidInputError(
                f"fact text is over {MAX_FACT_TEXT_BYTES} bytes", code="fact_too_large"
            )
        check_text(self.text, "fact text", "invalid_fact")
        if self.kind not in FACT_KINDS:
            raise InvalidInputError(kind_error(self.kind), code="invalid_fact")
        low, high = MIN_IMPORTANCE, MAX_IMPORTANCE
        if not isinstance(self.importance, int) or not low <= self.importance <= high:
            raise InvalidInputError(
                f"importance must be an integer {low}-{high}", code="invalid_fact"
            )
        if isinstance(self.confidence, bool) or not isinstance(self.confidence, int | float):
            raise InvalidInputError(
                f"confidence must be a number, not {self.confidence!r}", code="invalid_fact"
            )
        if not MIN_CONFIDENCE <= float(self.confidence) <= MAX_CONFIDENCE:  # nor NaN
            raise InvalidInputError(
                f"confidence must be a number between {MIN_CONFIDENCE:g} and "
                f"{MAX_CONFIDENCE:g}, not {self.confidence!r}",
                code="invalid_fact",
            )
        if self.key is not None and (not self.key.strip() or len(self.key) > MAX_KEY_CHARS):
            raise InvalidInputError(
                f"key must be 1-{MAX_KEY_CHARS} characters", code="invalid_fact"
            )
        check_text(self.key, "key", "invalid_fact")
        if len(self.tags) > MAX_TAGS or any(not t or len(t) > MAX_TAG_CHARS for t in self.tags):
            raise InvalidInputError(
                f"at most {MAX_TAGS} tags of 1-{MAX_TAG_CHARS} characters", code="invalid_fact"
            )
        check_text(self.tags, "a tag", "invalid_fact")
        if self.source is not None:
            self.source.validate()
        if len(self.phrasings) > MAX_PHRASINGS:
            raise InvalidInputError(f"at most {MAX_PHRASINGS} phrasings", code="invalid_fact")
        for phrasing in self.phrasings:
            phrasing.validate()
        for name in TIME_FIELDS:
            parse_time(getattr(self, name), name)
        return self

    def stamped(self, ctx: RuntimeContext, now: datetime | None = None) -> Fact:
        """Validated copy with derived hash and id, creation time and session filled in.

        A fact of an agent's or the tenant's memory keeps no user's words: every reader of the
        scope would see them. Its source drops a text that quotes a user
        (``Source.quotes_a_user``: the flush's, ``memory_save``'s, one naming a session) and
        is not given the request's session; a text the caller writes for the shared fact
        itself (no session, its own origin label) is kept: that is supplying one explicitly."""
        self.validate()
        text_hash = content_hash(self.text)
        session_id = self.session_id or ctx.session_id
        source = self.source
        phrasings = self.phrasings
        if source is not None and ctx.scope != "user":
            source = source.for_shared_scope()
        if ctx.scope != "user":
            phrasings = tuple(
                replace(p, source=p.source.for_shared_scope() if p.source else None)
                for p in phrasings
            )
        elif source is not None and source.session_id is None and session_id is not None:
            source = replace(source, session_id=session_id)  # it came from this session
        now = now or utcnow()
        created_at = _not_ahead(parse_time(self.created_at, "created_at"), "created_at", now)
        updated_at = _not_ahead(parse_time(self.updated_at, "updated_at"), "updated_at", now)
        created_at = created_at or now
        return replace(
            self,
            content_hash=text_hash,
            id=fact_id(ctx.tenant_id, ctx.owner, text_hash),
            scope=ctx.scope,
            agent_id=ctx.agent_id if ctx.scope == "agent" else None,
            created_at=created_at,
            updated_at=updated_at or created_at,
            needs_verification=False,
            expires_at=parse_time(self.expires_at, "expires_at"),
            valid_to=parse_time(self.valid_to, "valid_to"),
            session_id=session_id,
            source=source,
            phrasings=phrasings,
            tags=tuple(dict.fromkeys(self.tags)),
        )

    def is_active(self, now: datetime | None = None) -> bool:
        """Not superseded, not closed, not expired."""
        if self.superseded_by is not None or self.valid_to is not None:
            return False
        return self.expires_at is None or self.expires_at > (now or utcnow())

    def to_dict(self) -> dict:
        """JSON-ready dict: export lines and Qdrant payloads (the API maps facts itself)."""
        return {
            "id": self.id,
            "text": self.text,
            "key": self.key,
            "kind": self.kind,
            "importance": self.importance,
            "confidence": self.confidence,
            "tags": list(self.tags),
            "source": self.source.to_dict() if self.source is not None else None,
            "session_id": self.session_id,
            "created_at": iso_time(self.created_at),
            "updated_at": iso_time(self.updated_at),
            "expires_at": iso_time(self.expires_at),
            "superseded_by": self.superseded_by,
            "valid_to": iso_time(self.valid_to),
            "content_hash": self.content_hash,
            "access_count": self.access_count,
            "last_accessed_at": iso_time(self.last_accessed_at),
            "scope": self.scope or "user",
            "agent_id": self.agent_id,
            "phrasings": [p.to_dict() for p in self.phrasings],
        }

    def flagged_for_verification(self, flag: bool) -> Fact:
        """This fact with ``needs_verification`` set to ``flag``, its other fields copied as
        they are (they were checked when it was made). Every recalled fact is flagged, and
        ``dataclasses.replace`` runs ``__init__`` and ``__post_init__`` again: 5.5 µs a fact
        against 2.5 warm, ten a recall."""
        if flag == self.needs_verification:
            return self
        copy = object.__new__(Fact)
        for name, value in zip(_FACT_FIELDS, _fact_values(self), strict=True):
            object.__setattr__(copy, name, value)
        object.__setattr__(copy, "needs_verification", flag)
        return copy

    @classmethod
    def from_dict(cls, data: dict) -> Fact:
        return cls(
            text=data["text"],
            key=data.get("key"),
            kind=data.get("kind") or "fact",
            importance=int(data.get("importance", 5)),
            confidence=float(data.get("confidence", 1.0)),
            tags=tuple(data.get("tags") or ()),
            source=Source.coerce(data.get("source")),
            session_id=data.get("session_id"),
            created_at=parse_time(data.get("created_at"), "created_at"),
            # stored before facts had an update time: updated when created
            updated_at=parse_time(data.get("updated_at"), "updated_at")
            or parse_time(data.get("created_at"), "created_at"),
            expires_at=parse_time(data.get("expires_at"), "expires_at"),
            superseded_by=data.get("superseded_by"),
            valid_to=parse_time(data.get("valid_to"), "valid_to"),
            id=data.get("id") or "",
            content_hash=data.get("content_hash") or "",
            access_count=int(data.get("access_count") or 0),
            last_accessed_at=parse_time(data.get("last_accessed_at"), "last_accessed_at"),
            scope=data.get("scope") or "user",
            agent_id=data.get("agent_id"),
            phrasings=tuple(Phrasing.coerce(p) for p in data.get("phrasings") or ()),
        )


_FACT_FIELDS = tuple(f.name for f in fields(Fact))
_fact_values = attrgetter(*_FACT_FIELDS)


def iso_time(value: datetime | None) -> str | None:
    """A time as stored and compared: ISO 8601 with its offset (None stays None)."""
    return value.isoformat() if value else None


TIME_EXAMPLE = "2025-01-31T09:30:00Z"


class InvalidTimeError(InvalidInputError):
    """A time that is not one, or that no UTC datetime can hold (``0001-01-01T00:00:00+14:00``
    is before year 1 in UTC). ``field`` names it; ``reason`` says what is wrong without it."""

    code = "invalid_time"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field, self.reason = field, reason


def parse_time(value: str | datetime | None, field: str = "time") -> datetime | None:
    """ISO-8601 in, aware UTC datetime out (naive times are taken as UTC); None and "" are
    None. The one check of every time the service is given, whatever the entry point: one
    that is not an ISO-8601 time, or lies outside years 1-9999 once in UTC, raises
    ``InvalidTimeError`` (an ``InvalidInputError``: a 422, one CLI error line) naming
    ``field``."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            not_a_time = f"must be an ISO-8601 time ({TIME_EXAMPLE}), not {value!r}"
            raise InvalidTimeError(field, not_a_time) from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):  # a zone's own offset can overflow, too
        pass
    side = "before 0001-01-01T00:00:00Z" if parsed.year == 1 else "after 9999-12-31T23:59:59Z"
    raise InvalidTimeError(
        field, f"must be a time in years 1-9999 in UTC; {_shown(value)} is {side}"
    )


def _not_ahead(value: datetime | None, field: str, now: datetime) -> datetime | None:
    """``value``, unless it is later than ``now`` by more than a clock's skew: a fact given
    a time to come would be missing from every ``as_of`` answer until then."""
    if value is not None and value > now + timedelta(seconds=MAX_CLOCK_SKEW_S):
        raise InvalidTimeError(
            field,
            f"{value.isoformat()} is in the future: at most {MAX_CLOCK_SKEW_S // 60} minutes "
            f"ahead of this server's clock ({now.isoformat(timespec='seconds')}) is taken as "
            "clock skew",
        )
    return value


def _shown(value: str | datetime) -> str:
    if isinstance(value, str):
        return repr(value)
    try:
        return repr(value.isoformat())
    except (OverflowError, ValueError):  # its zone's offset overflows too
        return repr(value)


SCOPE_ORDER = {"user": 0, "agent": 1, "tenant": 2}  # narrowest first: it wins on a key


def hide_shadowed(facts: Sequence[Fact]) -> list[Fact]:
    """``facts`` without those a narrower scope's active fact overrides on the same ``key``
    (user over agent over tenant): the rule recall applies, for callers that list scopes."""
    narrowest: dict[str, int] = {}
    for fact in facts:
        if fact.key is not None and fact.is_active():
            rank = SCOPE_ORDER.get(fact.scope or "user", 0)
            narrowest[fact.key] = min(rank, narrowest.get(fact.key, rank))
    return [
        f
        for f in facts
        if f.key is None or SCOPE_ORDER.get(f.scope or "user", 0) <= narrowest.get(f.key, 9)
    ]


@dataclass(frozen=True, slots=True)
class Recall:
    """A retrieved fact, its fused score, and the rank it had in each retriever (1-based).
    ``confidence``: the fact's stored confidence decayed by its age at the moment asked about
    (``ConfidenceDecay``; the stored value when decay is off)."""

    fact: Fact
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)
    scores: dict[str, float | None] = field(default_factory=dict)
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What recording one fact did: ``created``, ``duplicate``, ``superseded`` (an older
    fact with the same key was replaced; its ids are in ``superseded_ids``) or ``merged`` (a
    near-duplicate of the stored fact ``merged_into``, which ``id`` then names: it keeps the
    text as one of its phrasings). ``redacted``: the sensitive values replaced before it was
    stored, by kind (``redaction``)."""

    id: str
    status: RecordStatus
    superseded_ids: tuple[str, ...] = ()
    merged_into: str | None = None
    redacted: dict[str, int] = field(default_factory=dict)
