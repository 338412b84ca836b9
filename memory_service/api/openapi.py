"""The error responses each operation declares in the OpenAPI document, from one table.

What an operation can answer follows mostly from its shape in the document: a security
requirement (401), a request body (413, 415), parameters or a body (422), the ``/v1`` backends
(503). What follows from a route's own logic (403 for an admin key, 404 for an id, 409 for
``expected_version``, an LLM's 502/504) is in ``ROUTE_ERRORS``. ``document_errors`` adds both
to the generated document, each with the real body (``ErrorResponse``, from ``api/errors.py``);
a description a route gives itself is kept. The document is post-processed rather than the
routes edited because FastAPI builds a route's responses when the route is included.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from memory_service.api.schemas.errors import ErrorResponse

ERRORS: dict[int, str] = {
    401: "missing or unknown API key (code unauthorized)",
    403: "the key's role may not do this: an admin key, or a curator key for shared memory "
    "(code forbidden); a personal key names another user, or reaches for every user "
    "(code forbidden_user)",
    404: "nothing stored under this id for this user (code not_found)",
    409: "the session changed meanwhile (expected_version: conflict), or the user is being "
    "erased (user_erased)",
    413: "the request body is over MEMORY_API__MAX_BODY_BYTES, or a model's context window "
    "(payload_too_large, context_overflow)",
    415: "the body is not sent as JSON (code unsupported_media_type)",
    422: "a field, id or query parameter is invalid (validation_error, invalid_id, ...)",
    502: "the LLM failed or sent an unusable reply (llm_error, flush_failed)",
    503: "a backend or the LLM is not configured or unreachable (unavailable, ...)",
    504: "the LLM did not answer in MEMORY_LLM__TIMEOUT_S (llm_timeout)",
}

_LLM = {502, 503, 504}

# (method, path template) -> the statuses a route's own logic adds to the derived ones.
ROUTE_ERRORS: dict[tuple[str, str], set[int]] = {
    ("post", "/v1/memories"): {403, 409},  # 403: agent or tenant scope with a user key
    ("get", "/v1/memories/{memory_id}"): {404},
    ("delete", "/v1/memories/{memory_id}"): {403, 404},
    ("post", "/v1/memories/{memory_id}/confirm"): {403, 404, 409},
    ("post", "/v1/sessions/{session_id}/messages"): {409} | _LLM,
    ("get", "/v1/sessions/{session_id}"): {404},
    ("post", "/v1/sessions/{session_id}/compact"): {409, 413} | _LLM,
    ("get", "/v1/sessions/{session_id}/tool-results"): {404},
    ("delete", "/v1/sessions/{session_id}"): {404},
    ("post", "/v1/chat"): _LLM | {409, 413},
    ("post", "/v1/maintenance/run"): _LLM | {403},
    ("post", "/v1/import"): {403, 409, 413, 415},
    ("delete", "/v1/users/{user_id}"): {403, 404},
}

_METHODS = ("get", "put", "post", "delete", "patch")
_REF = "#/components/schemas/{model}"
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}}


def operation_errors(method: str, path: str, operation: dict[str, Any]) -> set[int]:
    """The error statuses an operation of the document can answer."""
    found: set[int] = set(ROUTE_ERRORS.get((method, path), set()))
    if operation.get("security"):
        found |= {401, 403}  # 403: any key route refuses a personal key another user
    if "requestBody" in operation:
        found |= {413, 415, 422}
    if operation.get("parameters"):
        found.add(422)
    if path.startswith("/v1/"):
        found.add(503)
    return found


def error_schemas() -> dict[str, dict]:
    """``ErrorResponse`` and the models it uses, as OpenAPI components."""
    schema = ErrorResponse.model_json_schema(ref_template=_REF)
    defs = schema.pop("$defs", {})
    return {"ErrorResponse": schema, **defs}


def add_error_responses(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with every operation's error responses declared (in place)."""
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for status in sorted(operation_errors(method, path, operation)):
                given = responses.setdefault(str(status), {})
                if status == 422 and "HTTPValidationError" in str(given.get("content")):
                    given.clear()  # FastAPI's default 422 body is not what this API sends
                given.setdefault("description", ERRORS[status])
                given["content"] = {**_ERROR_CONTENT, **given.get("content", {})}
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(error_schemas())
    for unused in ("HTTPValidationError", "ValidationError"):
        if unused not in str(document["paths"]):
            schemas.pop(unused, None)
    return document


def document_errors(app: FastAPI) -> None:
    """Make ``app.openapi()`` declare the error responses (once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_error_responses(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
