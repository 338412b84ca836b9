"""API routers, one module per resource, each made by ``resource_router``."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from memory_service.api.content_type import require_json_body


def resource_router(tag: str) -> APIRouter:
    """A resource's router: its routes under ``/v1``, tagged ``tag`` in the OpenAPI document,
    each refusing a body that does not say it is JSON (``require_json_body``)."""
    return APIRouter(prefix="/v1", tags=[tag], dependencies=[Depends(require_json_body)])
