"""The error body every 4xx/5xx answers (``api/errors.py``), as the OpenAPI document shows it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ErrorObject(BaseModel):
    """``code``: a stable word to branch on; ``message``: for people. Some codes add fields
    (``details`` of a validation error, ``bad_lines`` of an import)."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(examples=["not_found"])
    message: str = Field(examples=["no memory 'abc' for this user"])


class ErrorResponse(BaseModel):
    """``{"error": {"code", "message"}}``."""

    error: ErrorObject
