"""Bodies of ``POST /v1/maintenance/run``: one ``MaintenanceReport`` per user."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from memory_service.api.schemas.common import Out, Strict, TokenUsage, UserId


class MaintenanceRequest(Strict):
    user_id: UserId | None = Field(None, description="one user; omitted: every user")
    force: bool = Field(
        False,
        description="run even within the minimum gap between a user's runs "
        "(MEMORY_MEMORY__CONSOLIDATION_MIN_GAP, 30 minutes by default)",
    )


class ConsolidationOut(Out):  # a pipeline.consolidation.ConsolidationResult
    """How MEMORY.md was rewritten (``method``: llm or deterministic), or why the rewrite was
    ``refused``; ``lost``: facts of the old MEMORY.md the new one does not hold."""

    method: str
    written: bool
    facts_in: int
    bullets_out: int
    lost: int
    refused: str | None
    snapshot: str | None
    usage: TokenUsage | None


class MaintenanceReportOut(Out):  # a pipeline.maintenance.MaintenanceReport
    """What one run did for one user (or a shared scope: ``scope`` agent | tenant, with
    ``user_id`` null): ``status`` ran | skipped_recent | busy | failed, with a count per step."""

    tenant_id: str
    user_id: str | None
    scope: str
    agent_id: str | None
    status: str
    counts: dict[str, int]
    consolidation: ConsolidationOut | None
    error: str | None


class MaintenanceRun(Out):
    reports: Annotated[
        list[MaintenanceReportOut], Field(description="one report per user, with step counts")
    ]
