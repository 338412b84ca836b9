"""``GET /v1/export``, ``GET /v1/users/{user_id}/export`` and ``POST /v1/import``: facts out
and back in, as JSON lines.

The lines are the CLI's (``memory-service export`` / ``import``, see
``memory_service.pipeline.transfer``);
the tenant is always the key's: export never reads another tenant, and an import line that
names another tenant is a bad line. Who exports what: an admin or application key its tenant
(every user, then the shared memory) or one user; a personal key its own user only, through
either route (``deps``: another user is a 403). Import takes an admin key (the tenant's lines)
or a personal key (its own user's lines only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from memory_service.api.deps import (
    LongTermDep,
    MemoriesDep,
    PrincipalDep,
    ServicesDep,
    user_context,
)
from memory_service.api.errors import ApiError
from memory_service.api.keys import Principal
from memory_service.api.routes import resource_router
from memory_service.api.schemas.common import UserId
from memory_service.api.schemas.transfer import ExportQuery, ImportSummary
from memory_service.domain.errors import ForbiddenError
from memory_service.domain.redaction import Redactor
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.transfer import (
    SHOWN_BAD_LINES,
    BadLine,
    import_records,
    parse_import,
    summarize,
    to_line,
)
from memory_service.usecases import transfer as cases
from memory_service.usecases.base import Memories

router = resource_router("transfer")

NDJSON = "application/x-ndjson"
IMPORT_PATH = "/v1/import"
IMPORT_TYPES = frozenset({NDJSON, "application/jsonl", "application/x-jsonlines", "text/plain"})
SHOWN_IN_MESSAGE = 5
_LINES_SCHEMA = {"schema": {"type": "string", "description": "one JSON object per line"}}


def _chunks(pages: Iterator[list[dict[str, Any]]]) -> Iterator[str]:
    """One chunk per backend page: a large tenant is never held whole."""
    for page in pages:
        yield "".join(to_line(record) for record in page)


def _filename(tenant_id: str, user_id: str | None) -> str:
    return f"memories-{tenant_id}{f'-{user_id}' if user_id else ''}.jsonl"  # ids are safe


_EXPORTED = {200: {"description": "the facts as JSON lines", "content": {NDJSON: _LINES_SCHEMA}}}


def _export(memories: Memories, tenant_id: str, user_id: str | None) -> StreamingResponse:
    pages = cases.export_facts(
        memories, cases.ExportFacts(tenant_id, user_id)
    )  # errors before the first byte
    return StreamingResponse(
        _chunks(pages),
        media_type=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="{_filename(tenant_id, user_id)}"'},
    )


@router.get("/export", response_class=StreamingResponse, responses=_EXPORTED)
def export_facts(
    query: Annotated[ExportQuery, Query()], principal: PrincipalDep, memories: MemoriesDep
) -> StreamingResponse:
    """Every fact of the key's tenant (or of one ``user_id``), superseded and expired ones
    included, one JSON object per line: the lines ``memory-service export`` writes, ready for
    ``POST /v1/import`` or ``memory-service import``. Streamed page by page. A user (or a
    tenant) with no facts is an empty export, 200 with no lines, as list and search answer
    empty; ``memory-service export`` likewise writes nothing and exits 0. The whole tenant
    takes an admin or application key; a personal key exports its own user (``user_id``
    omitted or its own)."""
    user_id = principal.user_for(query.user_id)
    return _export(memories, principal.tenant_id, user_id)


@router.get("/users/{user_id}/export", response_class=StreamingResponse, responses=_EXPORTED)
def export_user(
    user_id: Annotated[UserId, Path(description="the user whose facts to export")],
    principal: PrincipalDep,
    memories: MemoriesDep,
) -> StreamingResponse:
    """One user's own facts (their user memory, inactive facts included; none of the shared
    memory they read), as ``GET /v1/export`` writes them: the user's copy of their data. A
    personal key exports its own user only (403 ``forbidden_user`` for another)."""
    ctx = user_context(principal, user_id)
    return _export(memories, ctx.tenant_id, ctx.user_id)


def _check_media_type(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in IMPORT_TYPES:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send the lines as Content-Type: {NDJSON} (or text/plain), not {media_type or 'none'}",
        )


def _bad_lines(bad: list[BadLine]) -> ApiError:
    shown = "; ".join(f"line {b.line_no}: {b.message}" for b in bad[:SHOWN_IN_MESSAGE])
    more = f" (+{len(bad) - SHOWN_IN_MESSAGE} more)" if len(bad) > SHOWN_IN_MESSAGE else ""
    return ApiError(
        422,
        "bad_lines",
        f"{len(bad)} bad lines, nothing imported: {shown}{more}",
        bad_lines=[{"line": b.line_no, "message": b.message} for b in bad[:SHOWN_BAD_LINES]],
    )


def _decode(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = body[: exc.start].count(b"\n") + 1
        raise _bad_lines([BadLine(line_no, "not UTF-8")]) from exc


def _import(
    memory: LongTermMemory, principal: Principal, text: str, redactor: Redactor
) -> ImportSummary:
    tenant_id, user_id = principal.tenant_id, principal.user_id
    lines, bad = parse_import(
        text.split("\n"), tenant_id=tenant_id, user_id=user_id, redactor=redactor
    )
    if bad:
        raise _bad_lines(bad)
    return ImportSummary.model_validate(summarize(lines, import_records(memory, lines)))


@router.post(
    "/import",
    response_model=ImportSummary,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {NDJSON: _LINES_SCHEMA, "text/plain": _LINES_SCHEMA},
        }
    },
    responses={
        403: {"description": "the key is neither an admin key nor a personal key"},
        413: {"description": "the body is over MEMORY_API__MAX_IMPORT_BYTES"},
        415: {"description": "the body is not sent as JSON lines"},
        422: {"description": "bad lines (code bad_lines, listed in error.bad_lines)"},
    },
)
async def import_facts(
    request: Request, principal: PrincipalDep, memory: LongTermDep, services: ServicesDep
) -> ImportSummary:
    """Record exported lines (``GET /v1/export`` or ``memory-service export``) for the key's
    tenant. Needs an admin key (lines carry history, ``superseded_by``, ``valid_to``,
    ``created_at``, that ``POST /v1/memories`` never lets a client set), or a personal key,
    bringing its own user's lines back. Every line is checked first: one bad line (bad JSON,
    a bad field, another tenant's ``tenant_id``, for a personal key another user's or a shared
    scope's line) and nothing is written, with the bad lines named. Ids are derived, so they
    come back equal, and importing the same lines twice only counts duplicates. Sensitive
    data is redacted as ``POST /v1/memories`` does it (a redacted fact gets the id of its
    redacted text), or, under ``MEMORY_PRIVACY__REDACTION=refuse``, its line is a bad line."""
    if not principal.may("admin") and principal.user_id is None:
        raise ForbiddenError("importing needs an admin key or a personal key")
    _check_media_type(request)
    text = _decode(await request.body())
    return await run_in_threadpool(_import, memory, principal, text, services.redactor)
