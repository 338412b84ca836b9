"""``POST /v1/maintenance/run``: maintenance now, for the admin key's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from memory_service.api.deps import AdminDep, ServicesDep, user_context
from memory_service.api.schemas import UserId

router = APIRouter(prefix="/v1", tags=["maintenance"])


class MaintenanceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UserId | None = Field(None, description="one user; omitted: every user")
    force: bool = Field(False, description="ignore the 30-minute minimum gap per user")


class MaintenanceRun(BaseModel):
    reports: Annotated[list[dict], Field(description="one report per user, with step counts")]


@router.post("/maintenance/run", response_model=MaintenanceRun)
def run_maintenance(
    body: MaintenanceRequest, principal: AdminDep, services: ServicesDep, request: Request
):
    """Dedup, supersession, expiry, archival, retention and consolidation, with counts per
    step. Needs an admin key; touches only that key's tenant."""
    from memory_service.pipeline.scheduler import known_users, run_all

    maintenance = request.app.state.maintenance
    if body.user_id is not None:
        targets = [user_context(principal, body.user_id)]
    else:
        targets = [
            ctx
            for ctx in known_users(
                services.settings.workspace, services.longterm, [principal.tenant_id]
            )
            if ctx.tenant_id == principal.tenant_id
        ]
    reports = run_all(maintenance, targets, force=body.force, progress=False)
    return MaintenanceRun(reports=[r.to_dict() for r in reports])
