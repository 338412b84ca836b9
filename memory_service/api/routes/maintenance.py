"""``POST /v1/maintenance/run``: maintenance now, for the admin key's tenant."""

from __future__ import annotations

from fastapi import Request

from memory_service.api.deps import AdminDep, ServicesDep, user_context
from memory_service.api.routes import resource_router
from memory_service.api.schemas.maintenance import MaintenanceRequest, MaintenanceRun

router = resource_router("maintenance")


@router.post("/maintenance/run", response_model=MaintenanceRun)
def run_maintenance(
    principal: AdminDep,
    services: ServicesDep,
    request: Request,
    body: MaintenanceRequest | None = None,
):
    """Dedup, supersession, expiry, archival, retention and consolidation, with counts per
    step. Needs an admin key; touches only that key's tenant. The body is optional: none is
    ``{}`` (every user, not forced)."""
    from memory_service.pipeline.scheduler import run_all

    body = body or MaintenanceRequest()
    maintenance = request.app.state.maintenance
    if body.user_id is not None:
        targets = [user_context(principal, body.user_id)]
    else:
        targets = [
            ctx
            for ctx in services.known_users([principal.tenant_id])
            if ctx.tenant_id == principal.tenant_id
        ]
    reports = run_all(maintenance, targets, force=body.force, progress=False)
    return MaintenanceRun.model_validate({"reports": reports})
