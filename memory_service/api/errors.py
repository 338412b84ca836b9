"""Every error leaves the API as ``{"error": {"code", "message"}}`` with a 4xx/5xx status."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_service.api.schemas.common import code_of
from memory_service.domain.errors import MemoryServiceError
from memory_service.observe.logs import already_logged, mark_logged
from memory_service.pipeline.transfer import json_problem

log = logging.getLogger(__name__)

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    503: "unavailable",
}


def error_body(code: str, message: str, **extra: object) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


INTERNAL_ERROR = error_body("internal_error", "internal server error")


class ApiError(Exception):
    """Raised by routes for a specific status and code; ``extra`` fields join the error
    object (e.g. the bad lines of an import)."""

    def __init__(self, status: int, code: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra


def _describe(errors: list[dict]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


def _not_json(error: dict, body: object) -> str:
    """A body that is not JSON, said as an import line's is (``transfer.json_problem``), with
    the line and column rather than FastAPI's "37: JSON decode error"."""
    cause = str((error.get("ctx") or {}).get("error", "not JSON"))
    problem = json_problem(cause)
    hint = _JSON_HINTS.get(cause, "")
    loc = error.get("loc") or ()
    pos = loc[-1] if loc and isinstance(loc[-1], int) else None
    if pos is None or not isinstance(body, str):
        return f"the body is not JSON ({problem}){hint}"
    line = body.count("\n", 0, pos) + 1
    column = pos - (body.rfind("\n", 0, pos) + 1) + 1
    return f"the body is not JSON ({problem} at line {line}, column {column}){hint}"


_JSON_HINTS = {
    "Invalid control character at": ": write it escaped, as \\n, \\t or \\u0001",
}


def _not_text(exc: UnicodeDecodeError) -> str:
    """A body that is not UTF-8 (nor the UTF-16 or -32 JSON may be sent in)."""
    bad = exc.object[exc.start : exc.start + 1]
    return (
        f"the body is not UTF-8 text: byte 0x{bad.hex()} at offset {exc.start} "
        f"({exc.reason}); send JSON encoded as UTF-8"
    )


def validation_code(errors: list[dict]) -> str:
    """One code for a failed validation: the service's code when every error carries the
    same one (a malformed id anywhere is ``invalid_id``), else ``validation_error``."""
    codes = {code_of(e) or "validation_error" for e in errors}
    return codes.pop() if len(codes) == 1 else "validation_error"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, **exc.extra), status_code=exc.status)

    @app.exception_handler(MemoryServiceError)
    async def _service_error(_: Request, exc: MemoryServiceError) -> JSONResponse:
        if exc.http_status >= 500:
            log.log(exc.log_level, "service error (%s): %s", exc.code, exc)
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if len(errors) == 1 and errors[0].get("type") == "json_invalid":
            return JSONResponse(
                error_body("validation_error", _not_json(errors[0], exc.body)), status_code=422
            )
        details = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "code": code_of(e) or "validation_error",
            }
            for e in errors[:20]
        ]
        return JSONResponse(
            error_body(validation_code(errors), _describe(errors), details=details),
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's "error parsing the body"
            message = _not_text(exc.__cause__)
        return JSONResponse(
            error_body(code, message), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        """Only what escapes ``RequestObservability`` itself: it answers (and logs, under the
        request's trace) every other unexpected error."""
        if not already_logged(exc):
            log.exception("unhandled error")
            mark_logged(exc)
        return JSONResponse(INTERNAL_ERROR, status_code=500)
