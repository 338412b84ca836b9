"""Facts in and out of a backend as JSON lines: shared by the CLI and the HTTP API.

One line per fact: ``{"tenant_id": ..., "user_id": ..., **Fact.to_dict()}`` (``scope`` and
``agent_id`` included; a shared fact of an agent or of the tenant has ``user_id`` null). A
tenant's export covers its users, then its agents' and its own shared memory. Export lists every
fact, superseded and expired ones included, so history survives the move. Import checks every
line before writing anything (a bad file writes nothing and names its bad lines), then records
each owner's facts with ``record()``: ids are derived from tenant, owner and text, so they come
out equal, and importing a file twice changes nothing (every line ``duplicate``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from memory_service.domain.context import RuntimeContext, check_scope, scope_context, validate_id
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import TIME_FIELDS, Fact, parse_time
from memory_service.domain.limits import (
    MAX_CONFIDENCE,
    MAX_IMPORTANCE,
    MIN_CONFIDENCE,
    MIN_IMPORTANCE,
)
from memory_service.domain.redaction import Redactor
from memory_service.longterm.protocol import ListsAgents, LongTermMemory
from memory_service.stores.user_data import ListsUsers

PAGE = 1000
RECORD_BATCH = 500
SHOWN_BAD_LINES = 50
STATUSES = ("created", "superseded", "duplicate", "merged")


@dataclass(frozen=True, slots=True)
class ImportLine:
    line_no: int
    ctx: RuntimeContext
    fact: Fact  # stamped: id and content hash derived


@dataclass(frozen=True, slots=True)
class BadLine:
    line_no: int
    message: str


def check_ids(tenant_id: str, user_id: str | None) -> None:
    validate_id(tenant_id, "tenant_id")
    if user_id is not None:
        validate_id(user_id, "user_id")


def _users(longterm: LongTermMemory, tenant_id: str) -> list[str]:
    if not isinstance(longterm, ListsUsers):
        raise InvalidInputError(
            "this backend cannot list a tenant's users: export one user at a time "
            "(--user on the command line, user_id over HTTP)",
            code="no_users",
        )
    return longterm.users(tenant_id)


def export_users(
    longterm: LongTermMemory, tenant_id: str, user_id: str | None = None
) -> list[RuntimeContext]:
    """The memories an export covers: one user's own (none of the shared memory they read:
    it is not theirs), or the tenant's users' and then its shared memory (each agent's, the
    tenant's). Called eagerly, so a bad id fails before any output."""
    check_ids(tenant_id, user_id)
    if user_id:
        return [RuntimeContext(tenant_id, user_id)]
    owners = [RuntimeContext(tenant_id, u) for u in _users(longterm, tenant_id)]
    if isinstance(longterm, ListsAgents):
        owners += [scope_context(tenant_id, "agent", a) for a in longterm.agents(tenant_id)]
    return [*owners, scope_context(tenant_id, "tenant")]


def export_pages(
    longterm: LongTermMemory, tenant_id: str, owners: Iterable[RuntimeContext]
) -> Iterator[list[dict[str, Any]]]:
    """The owners' facts, inactive ones included, one backend page at a time (bounded memory)."""
    for ctx in owners:
        user = ctx.user_id if ctx.scope == "user" else None
        cursor = None
        while True:
            page = longterm.list(ctx, limit=PAGE, cursor=cursor, include_inactive=True)
            if page.items:
                yield [{"tenant_id": tenant_id, "user_id": user, **f.to_dict()} for f in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break


def export_records(
    longterm: LongTermMemory, tenant_id: str, user_id: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every fact of the tenant (or of one user), inactive ones included, owner by owner."""
    users = export_users(longterm, tenant_id, user_id)
    return (record for page in export_pages(longterm, tenant_id, users) for record in page)


def to_line(record: dict[str, Any]) -> str:
    """One exported record as the line both the CLI and the API write."""
    return json.dumps(record, ensure_ascii=False) + "\n"


# What ``json`` says, as a person would say it (its message starts with one of these).
_JSON_PROBLEMS = {
    "Expecting value": "expected a value",
    "Expecting property name enclosed in double quotes": "expected a property name in double "
    "quotes",
    "Expecting ',' delimiter": "expected a ','",
    "Expecting ':' delimiter": "expected a ':'",
    "Extra data": "more after the JSON value",
    "Unterminated string starting at": "a string is not closed",
    "Invalid control character at": "a control character inside a string",
    "Invalid \\escape": "a bad backslash escape",
    "Invalid \\uXXXX escape": "a bad \\u escape",
}
_JSON_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number"}
# ``source`` is an object or an old export's string: ``Source.coerce`` checks it
_TEXT_FIELDS = (
    "key",
    "kind",
    "session_id",
    "id",
    "content_hash",
    "superseded_by",
    "scope",
    "agent_id",
)


def json_problem(message: str) -> str:
    """What ``json``'s error ``message`` (``JSONDecodeError.msg``) says, in a person's words;
    the API's answer to a body that is not JSON says it the same way."""
    problem = next((v for k, v in _JSON_PROBLEMS.items() if message.startswith(k)), None)
    return problem or message[:1].lower() + message[1:]


def _loads(raw: str) -> dict[str, Any]:
    """The line's JSON object, or ``InvalidInputError`` saying in words why it is not one."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        problem = json_problem(exc.msg)
        raise InvalidInputError(f"not JSON ({problem} at column {exc.colno})") from None
    if not isinstance(data, dict):
        kind = "true or false" if isinstance(data, bool) else _JSON_KINDS.get(type(data), "null")
        raise InvalidInputError(f"not a JSON object: each line is one fact, {{...}}, not {kind}")
    return data


def _check_fields(data: dict[str, Any]) -> None:
    """Every field the line has is of a type ``Fact.from_dict`` reads; else says which."""
    shared = data.get("scope") not in (None, "user")
    for name in ("tenant_id", "text") if shared else ("tenant_id", "user_id", "text"):
        if data.get(name) is None:
            raise InvalidInputError(f"{name} is missing")
    if not isinstance(data["text"], str):
        raise InvalidInputError("text must be a string")
    for name in _TEXT_FIELDS:
        if data.get(name) is not None and not isinstance(data[name], str):
            raise InvalidInputError(f"{name} must be a string")
    if "importance" in data and not _is_number(data["importance"], int):
        raise InvalidInputError(f"importance must be an integer {MIN_IMPORTANCE}-{MAX_IMPORTANCE}")
    if "confidence" in data and not _is_number(data["confidence"], float):
        raise InvalidInputError(
            f"confidence must be a number between {MIN_CONFIDENCE:g} and {MAX_CONFIDENCE:g}"
        )
    tags = data.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise InvalidInputError("tags must be a list of strings")
    for name in (*TIME_FIELDS, "last_accessed_at"):
        parse_time(data.get(name), name)  # the message names the field and says why


def _is_number(value: object, kind: type[int] | type[float]) -> bool:
    try:
        kind(value)  # type: ignore[arg-type]
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _parse_line(
    line_no: int,
    raw: str,
    tenant_id: str | None,
    user_id: str | None = None,
    redactor: Redactor | None = None,
) -> ImportLine:
    data = _loads(raw)
    _check_fields(data)
    scope = check_scope(data.get("scope") or "user")
    if scope == "user":
        ctx = RuntimeContext(data["tenant_id"], data["user_id"])
    else:
        ctx = scope_context(data["tenant_id"], scope, data.get("agent_id"))
    if tenant_id is not None and ctx.tenant_id != tenant_id:
        raise InvalidInputError(
            f"tenant_id {ctx.tenant_id!r} is not the importing tenant {tenant_id!r}",
            code="foreign_tenant",
        )
    if user_id is not None and (ctx.scope != "user" or ctx.user_id != user_id):
        whose = f"user {ctx.user_id!r}" if ctx.scope == "user" else f"the {ctx.scope} memory"
        raise InvalidInputError(
            f"the line is {whose}'s, not the importing user {user_id!r}'s", code="foreign_user"
        )
    fact = Fact.from_dict(data)
    stamped = fact.stamped(ctx)
    if fact.id and fact.id != stamped.id:
        raise InvalidInputError(
            f"id {fact.id} does not belong to this tenant, owner and text (ids are derived: "
            "leave 'id' out to record edited text as a new fact)"
        )
    if fact.content_hash and fact.content_hash != stamped.content_hash:
        raise InvalidInputError("content_hash does not match the text")
    if redactor is not None:
        redactor.fact(fact)  # refuse: a bad line, so nothing is written (record redacts)
    return ImportLine(line_no, ctx, stamped)


def parse_import(
    lines: Iterable[str],
    tenant_id: str | None = None,
    user_id: str | None = None,
    redactor: Redactor | None = None,
) -> tuple[list[ImportLine], list[BadLine]]:
    """Every line checked; blank lines skipped. Line numbers are 1-based. With ``tenant_id``
    (the API: the caller's tenant), a line naming any other tenant is a bad line; with
    ``user_id`` (a personal key's user), so is one of any other user or of a shared scope;
    with a ``redactor`` that refuses, so is a line holding sensitive data."""
    good: list[ImportLine] = []
    bad: list[BadLine] = []
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            good.append(_parse_line(line_no, raw, tenant_id, user_id, redactor))
        except InvalidInputError as exc:
            bad.append(BadLine(line_no, exc.message))
        except (ValueError, TypeError, KeyError, AttributeError):  # a case _check_fields missed
            bad.append(BadLine(line_no, "not a fact this service can read"))
    return good, bad


def _already_there(stored: Fact | None, incoming: Fact) -> bool:
    """True when recording ``incoming`` would change nothing: the fact is stored and active
    (``record`` says duplicate), or stored and closed and arriving closed."""
    if stored is None:
        return False
    return stored.is_active() or not incoming.is_active()


def import_records(longterm: LongTermMemory, lines: list[ImportLine]) -> Counter[str]:
    """Record parsed lines owner by owner (a user, an agent, the tenant); count statuses
    (created, superseded, duplicate, merged)."""
    by_owner: dict[RuntimeContext, list[ImportLine]] = {}
    for line in lines:
        by_owner.setdefault(line.ctx, []).append(line)
    statuses: Counter[str] = Counter()
    for ctx, items in by_owner.items():
        for start in range(0, len(items), RECORD_BATCH):
            chunk = [line.fact for line in items[start : start + RECORD_BATCH]]
            stored = {f.id: f for f in longterm.get(ctx, [f.id for f in chunk])}
            todo = [f for f in chunk if not _already_there(stored.get(f.id), f)]
            if len(todo) < len(chunk):
                statuses["duplicate"] += len(chunk) - len(todo)
            if todo:
                statuses.update(r.status for r in longterm.record(ctx, todo))
    return statuses


def summarize(lines: list[ImportLine], statuses: Counter[str]) -> dict[str, int]:
    """``{"lines", "created", "superseded", "duplicate", "merged"}``: what ``import --json``
    prints."""
    return {"lines": len(lines), **{s: statuses.get(s, 0) for s in STATUSES}}
