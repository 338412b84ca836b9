"""``GET /v1/usage``: the calling tenant's LLM tokens and memory pipeline counters."""

from __future__ import annotations

from memory_service.api.deps import EveryUserDep, ServicesDep
from memory_service.api.routes import resource_router
from memory_service.api.schemas.usage import UsageReport

router = resource_router("usage")


@router.get("/usage", response_model=UsageReport)
def usage(principal: EveryUserDep, services: ServicesDep):
    """Tokens by purpose (chat, flush, compaction) with call counts, their total, and the
    flush counters (runs, facts created, retries, failures, dead letters). The whole tenant's:
    not for a personal key (403 ``forbidden_user``)."""
    return UsageReport.model_validate(services.state.usage.report(principal.tenant_id))
