"""One pydantic model per memory tool: the arguments the model may send.

Each model is the single statement of its tool's arguments: ``openai_tool()`` turns it into
the OpenAI function schema sent with a completion, and ``parse()`` validates what the model
sent back. A validation failure becomes one ``InvalidInputError`` whose message tells the
model how to correct the call (``Says`` gives a field's own wording for a broken constraint).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from memory_service.domain.errors import InvalidInputError, MemoryServiceError
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import FACT_KINDS, canonical_kind
from memory_service.domain.limits import (
    MAX_KEY_CHARS,
    MAX_QUERY_BYTES,
    MAX_TAG_CHARS,
    MAX_TAGS,
)
from memory_service.domain.messages import (
    MEMORY_CONSOLIDATE,
    MEMORY_EXTRACT,
    MEMORY_GET,
    MEMORY_PRUNE,
    MEMORY_RECALL,
    MEMORY_SAVE,
    MEMORY_SEARCH,
    SESSION_SEARCH,
)
from memory_service.tools.memory_files import memory_path_parts


@dataclass(frozen=True, slots=True)
class Says:
    """Field metadata: what the model is told when the field breaks one of its constraints,
    under which error code (the code the same mistake gets elsewhere, e.g. ``invalid_fact``)."""

    message: str
    code: str = "invalid_input"


def _lenient_int(value: object) -> object:
    """Models sometimes send "3" or 3.0 for 3; anything else is left to the strict check,
    which refuses booleans and fractions."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("NUL")
    return value


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(value)
    return value


def _memory_path(value: str) -> str:
    memory_path_parts(value)  # raises the path's own error (code invalid_path, ...)
    return value


# integers as the model may send them; constraints go before the validator, or pydantic's
# JSON schema shows them as "ge"/"le" instead of "minimum"/"maximum"
Line = Annotated[StrictInt, Field(ge=1), BeforeValidator(_lenient_int)]  # 1-based
Importance = Annotated[StrictInt, Field(ge=1, le=10), BeforeValidator(_lenient_int)]
# what a query may be is the use cases' one rule (``queries.check_query``: invalid_query,
# query_too_large), checked when the tool runs; the schema only shows it to the model
Query = Annotated[
    str,
    StringConstraints(strip_whitespace=True),
    Field(json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_BYTES}),
]
Key = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_KEY_CHARS),
    AfterValidator(_no_nul),
    Says(f"key must be 1-{MAX_KEY_CHARS} characters, no NUL", code="invalid_fact"),
]
# a kind, or a memory type that names one (``facts.KIND_ALIASES``: episodic is event, ...)
Kind = Annotated[str, AfterValidator(lambda v: _one_of(str(canonical_kind(v)), FACT_KINDS))]
_TYPE_ERRORS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "string_type": "a string",
}


class ToolArguments(BaseModel):
    """The arguments of one tool; subclasses set ``tool`` and ``description``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: ClassVar[str]
    description: ClassVar[str]

    @classmethod
    def openai_tool(cls) -> dict[str, Any]:
        """The OpenAI ``tools`` entry: the model's JSON schema without pydantic's extras."""
        return {
            "type": "function",
            "function": {
                "name": cls.tool,
                "description": cls.description,
                "parameters": _openai_parameters(cls.model_json_schema()),
            },
        }

    @classmethod
    def parse(cls, arguments: Mapping[str, object]) -> Self:
        """Validated arguments, or an ``InvalidInputError`` that says what to fix."""
        try:
            return cls.model_validate(dict(arguments))
        except ValidationError as exc:
            raise cls._refusal(exc.errors()) from None

    @classmethod
    def parse_json(cls, arguments: str | None) -> Self:
        """Arguments as the model sent them: a JSON object (empty means ``{}``)."""
        try:
            decoded = json.loads(arguments or "{}")
        except ValueError as exc:
            raise InvalidInputError(f"bad arguments: {exc}", code="invalid_arguments") from None
        if not isinstance(decoded, Mapping):
            raise InvalidInputError("tool arguments must be a JSON object")
        return cls.parse(decoded)

    @classmethod
    def _refusal(cls, errors: list[ErrorDetails]) -> InvalidInputError:
        originals = [e.get("ctx", {}).get("error") for e in errors]
        if len(errors) == 1 and isinstance(originals[0], InvalidInputError):
            return originals[0]  # e.g. a path's own error, with its code and class
        said = [cls._problem(e) for e in errors]
        return InvalidInputError("; ".join(m for _, m in said), code=said[0][0])

    @classmethod
    def _problem(cls, error: ErrorDetails) -> tuple[str, str]:
        """(code, message) for one validation error."""
        name = ".".join(str(part) for part in error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            return "invalid_arguments", f"bad arguments: unexpected keyword argument '{name}'"
        if kind == "missing":
            return "invalid_arguments", f"bad arguments: missing required argument '{name}'"
        original = error.get("ctx", {}).get("error")
        if isinstance(original, MemoryServiceError):
            return original.code, original.message
        if kind in _TYPE_ERRORS:
            return "invalid_input", f"{name} must be {_TYPE_ERRORS[kind]}"
        field = cls.model_fields.get(name)
        says = [m for m in field.metadata if isinstance(m, Says)] if field else []
        if says:
            return says[0].code, says[0].message
        return "invalid_input", f"{name}: {error['msg']}" if name else error["msg"]


def _openai_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """Keep what OpenAI reads: types, constraints, descriptions; an optional field is shown
    as its type (it is simply not required), not as ``anyOf [type, null]``."""
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        options = prop.pop("anyOf", None)
        if options is not None:
            typed = [o for o in options if o != {"type": "null"}]
            prop = {**typed[0], **prop} if len(typed) == 1 else {"anyOf": options, **prop}
        if prop.get("default", ...) is None:
            del prop["default"]
        properties[name] = {"type": prop.pop("type"), **prop} if "type" in prop else prop
    return {
        "type": "object",
        "properties": properties,
        "required": list(schema.get("required", [])),
        "additionalProperties": False,
    }


# -- the four tools -------------------------------------------------------------------------


FilterKind = Annotated[
    Literal["fact", "preference", "event", "procedure"], BeforeValidator(canonical_kind)
]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TAG_CHARS)]


class MemorySearchArgs(ToolArguments):
    """``memory_search(query, kind?, tags?, min_importance?, key?, as_of?)``; with any
    filter, only the related memories that match it (the literal file match cannot be
    filtered)."""

    tool: ClassVar[str] = MEMORY_SEARCH
    description: ClassVar[str] = (
        "Search the user's long-term memory: a literal, case-insensitive match over MEMORY.md "
        "and the daily memory files (first the number of matching lines, then each as "
        "'Source: path#line: text'), plus the memories most related to the query. The query "
        "'*' lists the remembered facts instead, most important first. Optional filters "
        "(kind, tags, min_importance, key, as_of) return only the related memories that "
        "match; as_of asks what was true at a past moment (superseded facts included)."
    )

    query: Query = Field(description="words or a phrase to find; '*' lists what is remembered")
    kind: FilterKind | None = Field(None, description="only memories of this kind")
    tags: Annotated[
        list[Tag] | None,
        Field(max_length=MAX_TAGS),
        Says(f"tags: at most {MAX_TAGS} of 1-{MAX_TAG_CHARS} characters", "invalid_filter"),
    ] = Field(None, description="only memories with at least one of these tags")
    min_importance: Annotated[
        Importance | None, Says("min_importance must be an integer 1-10", "invalid_filter")
    ] = Field(None, description="only memories at least this important (1-10)")
    key: Annotated[
        str | None,
        StringConstraints(min_length=1, max_length=MAX_KEY_CHARS),
        Says(f"key: 1-{MAX_KEY_CHARS} characters", "invalid_filter"),
    ] = Field(None, description="only memories with this subject key, e.g. user.city")
    as_of: str | None = Field(None, description="an ISO-8601 time in the past: what was valid then")

    def fact_filter(self) -> FactFilter | None:
        """The filter the arguments ask for (None: none); times are checked by recall."""
        fact_filter = FactFilter(
            kinds=(self.kind,) if self.kind else (),
            tags_any=tuple(self.tags or ()),
            min_importance=self.min_importance,
            key=self.key,
            as_of=self.as_of,  # type: ignore[arg-type] - FactFilter.check parses it
        )
        return None if fact_filter.is_empty else fact_filter


class MemoryGetArgs(ToolArguments):
    """``memory_get(path, start_line?, end_line?)``: 1-based, inclusive."""

    tool: ClassVar[str] = MEMORY_GET
    description: ClassVar[str] = (
        "Read lines of one memory file, e.g. a 'Source' that memory_search returned, each as "
        "'number|text'. Paths are relative: MEMORY.md or memory/YYYY-MM-DD.md."
    )

    path: Annotated[str, AfterValidator(_memory_path)] = Field(
        description="MEMORY.md or memory/<file>.md"
    )
    start_line: Annotated[Line | None, Says("start_line counts from 1")] = Field(
        None, description="1-based"
    )
    end_line: Annotated[Line | None, Says("end_line counts from 1")] = Field(
        None, description="inclusive"
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        first, last = self.start_line, self.end_line
        if first is not None and last is not None and last < first:
            raise InvalidInputError("end_line must not be before start_line")
        return self


class MemorySaveArgs(ToolArguments):
    """``memory_save(text, key?, importance?)``; the fact itself validates text and key."""

    tool: ClassVar[str] = MEMORY_SAVE
    description: ClassVar[str] = (
        "Remember one durable fact about the user right away (a stable fact, preference, "
        "decision or commitment), as one self-contained sentence."
    )

    text: str = Field(description="the fact, one sentence")
    key: str | None = Field(
        None,
        description="optional subject such as user.diet: a newer fact with the same key "
        "replaces the older one",
    )
    importance: Annotated[
        Importance | None, Says("importance must be an integer 1-10", code="invalid_fact")
    ] = Field(None, description="10: never forget (e.g. allergies); 1: trivia")


class SessionSearchArgs(ToolArguments):
    """``session_search(query)``."""

    tool: ClassVar[str] = SESSION_SEARCH
    description: ClassVar[str] = (
        "Find messages said in the user's past sessions (verbatim history, not curated memory)."
    )

    query: Query = Field(description="words to find")


# -- the keyed tools --------------------------------------------------------------------------


class MemoryExtractArgs(ToolArguments):
    """``memory_extract(key, text, importance?, kind?)``: record, compared with the same key."""

    tool: ClassVar[str] = MEMORY_EXTRACT
    description: ClassVar[str] = (
        "Record one fact under a key (a subject such as user.diet) and compare it with what "
        "is remembered under that key: the answer says created (nothing was), unchanged (the "
        "same fact is already kept) or superseded (the older fact, shown, is replaced)."
    )

    key: Key = Field(description="the subject, e.g. user.diet or project.deadline")
    text: str = Field(description="the fact, one self-contained sentence")
    importance: Annotated[
        Importance | None, Says("importance must be an integer 1-10", code="invalid_fact")
    ] = Field(None, description="10: never forget; 1: trivia (default 5)")
    kind: Annotated[
        Kind | None, Says(f"kind must be one of {', '.join(FACT_KINDS)}", code="invalid_fact")
    ] = Field(None, description="fact, preference, event or procedure")


class MemoryRecallArgs(ToolArguments):
    """``memory_recall(key, prefix?)``: the facts kept under a key, or a key prefix."""

    tool: ClassVar[str] = MEMORY_RECALL
    description: ClassVar[str] = (
        "Read what is remembered under a key (exact), or under every key that starts with "
        "it (prefix=true, e.g. 'user.' for all facts about the user's own subjects)."
    )

    key: Key = Field(description="a key such as user.diet, or a prefix such as user.")
    prefix: bool = Field(False, description="match every key starting with key")


MAX_MERGED_KEYS = 20  # memory_consolidate: keys merged into one insight
MAX_PRUNED_IDS = 50  # memory_prune: entries the model names in one call
MergeKeys = Annotated[
    list[Key],
    Field(min_length=1, max_length=MAX_MERGED_KEYS),
    Says(f"keys_to_merge: 1-{MAX_MERGED_KEYS} keys", code="invalid_fact"),
]


class MemoryConsolidateArgs(ToolArguments):
    """``memory_consolidate(keys_to_merge?, new_key?, text?)``: merge fragments into one
    insight (importance 10, kept for ever) that supersedes them; without arguments, rewrite
    the caller's MEMORY.md now."""

    tool: ClassVar[str] = MEMORY_CONSOLIDATE
    description: ClassVar[str] = (
        "Merge several fragments into one higher-level insight: give keys_to_merge (the keys "
        "of the fragments), new_key (one of them to merge in place, or a new key) and text "
        "(the insight, one self-contained sentence). The insight gets importance 10 (never "
        "forgotten) and the fragments are superseded by it. Without arguments: rewrite "
        "MEMORY.md from the facts that are still true (the previous file is kept)."
    )

    keys_to_merge: MergeKeys | None = Field(None, description="the keys of the fragments")
    new_key: Key | None = Field(None, description="the insight's key (may be a merged one)")
    text: Annotated[
        str | None,
        StringConstraints(strip_whitespace=True, min_length=1),
        AfterValidator(lambda v: _no_nul(v) if v is not None else v),
        Says("text must be non-empty, no NUL", code="invalid_fact"),
    ] = Field(None, description="the merged insight")

    @model_validator(mode="after")
    def _all_or_nothing(self) -> MemoryConsolidateArgs:
        given = [self.keys_to_merge is not None, self.new_key is not None, self.text is not None]
        if any(given) and not all(given):
            raise InvalidInputError(
                "memory_consolidate merges with keys_to_merge, new_key and text together "
                "(or rewrites MEMORY.md with none of them)",
                code="invalid_fact",
            )
        return self

    @property
    def merges(self) -> bool:
        return self.keys_to_merge is not None


class MemoryPruneArgs(ToolArguments):
    """``memory_prune(ids?, dry_run?, max_importance?)``: the entries named (wrong,
    duplicate, outdated), or else expired (and low-importance) facts."""

    tool: ClassVar[str] = MEMORY_PRUNE
    description: ClassVar[str] = (
        "Forget facts. Name the ones that are wrong, duplicated or outdated in ids (the "
        "id= of memory_search or memory_recall); without ids, find expired ones (their own "
        "expiry, or their age for their importance) and, with max_importance, every fact of "
        "that importance or less. A dry run (the default) only lists them; dry_run=false "
        "deletes them."
    )

    ids: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] | None,
        Field(min_length=1, max_length=MAX_PRUNED_IDS),
        Says(f"ids: 1-{MAX_PRUNED_IDS} fact ids", code="invalid_id"),
    ] = Field(None, description="the facts to forget")
    dry_run: bool = Field(True, description="list only (default); false: delete")
    max_importance: Annotated[Importance | None, Says("max_importance must be an integer 1-10")] = (
        Field(None, description="also prune facts of this importance or less")
    )


TOOL_ARGUMENTS: dict[str, type[ToolArguments]] = {
    model.tool: model
    for model in (
        MemorySearchArgs,
        MemoryGetArgs,
        MemorySaveArgs,
        SessionSearchArgs,
        MemoryExtractArgs,
        MemoryRecallArgs,
        MemoryConsolidateArgs,
        MemoryPruneArgs,
    )
}
