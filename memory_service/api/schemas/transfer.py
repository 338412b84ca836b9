"""Bodies of ``GET /v1/export`` and ``POST /v1/import`` (the lines themselves are
``memory_service.pipeline.transfer``'s)."""

from __future__ import annotations

from pydantic import Field

from memory_service.api.schemas.common import Out, Strict, UserId


class ExportQuery(Strict):
    """The query of ``GET /v1/export``. There is no ``tenant_id``: the export is always the
    key's tenant's, and one sent anyway is a 422."""

    user_id: UserId | None = Field(None, description="only this user; omitted: every user")


class ImportSummary(Out):
    """What an import did: every line is counted under exactly one status."""

    lines: int = Field(description="facts read (blank lines are skipped)")
    created: int = Field(description="facts new to this tenant")
    superseded: int = Field(description="facts recorded that replaced an active fact's key")
    duplicate: int = Field(description="facts already stored: importing twice changes nothing")
    merged: int = Field(
        0, description="near-duplicates of a stored fact, kept with it as one of its phrasings"
    )
