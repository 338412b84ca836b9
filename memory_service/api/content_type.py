"""A JSON body must say it is JSON: a dependency of every resource router
(``api.routes.resource_router``), so every JSON route answers 415.

FastAPI parses a body as JSON only when its ``Content-Type`` says so; otherwise the model is
validated against raw bytes and the client reads 422 "Input should be a valid dictionary",
which names no cause. Routes that read their body themselves (``POST /v1/import``, JSON lines)
declare no body model and are left to check their own media type.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.routing import APIRoute

from memory_service.api.errors import ApiError

JSON = "application/json"


def is_json(content_type: str) -> bool:
    """``application/json`` or ``application/<anything>+json``, parameters ignored."""
    media_type = content_type.split(";")[0].strip().lower()
    main, _, sub = media_type.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def require_json_body(request: Request) -> None:
    """415 ``unsupported_media_type`` for a non-empty body a JSON route would not parse."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.body_field is None:
        return
    content_type = request.headers.get("content-type", "")
    if is_json(content_type) or not await request.body():
        return  # an empty body is the model's to refuse: 422, the body is required
    raise ApiError(
        415,
        "unsupported_media_type",
        f"send the body as JSON with Content-Type: {JSON}, not {content_type or 'none'}",
    )
