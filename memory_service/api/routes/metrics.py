"""``GET /metrics``: the app's Prometheus metrics, open or behind an API key (a setting)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from memory_service.api.deps import require_every_user
from memory_service.api.metrics import CONTENT_TYPE, AppMetrics

METRICS_PATH = "/metrics"


def metrics_router(*, require_key: bool) -> APIRouter:
    """The route; ``require_key``: answer only with a valid API key that reaches every user of
    its tenant (any role but a personal key's: the figures are the whole service's)."""
    router = APIRouter(tags=["observability"])
    dependencies = [Depends(require_every_user)] if require_key else []

    @router.get(
        METRICS_PATH,
        dependencies=dependencies,
        response_class=Response,
        responses={200: {"description": "Prometheus text format", "content": {CONTENT_TYPE: {}}}},
    )
    def metrics(request: Request) -> Response:
        """Request counts and latencies by route template, retrieval stages, embedding,
        records, pipeline runs, dead letters, LLM tokens and facts (README: Observability).
        Open unless ``MEMORY_OBSERVABILITY__METRICS_REQUIRE_KEY`` is set."""
        app_metrics: AppMetrics = request.app.state.metrics
        return Response(app_metrics.exposition(), media_type=CONTENT_TYPE)

    return router
