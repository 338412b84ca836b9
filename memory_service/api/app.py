"""The FastAPI application: one factory, services injected, errors uniform."""

from __future__ import annotations

from fastapi import FastAPI

from memory_service import __version__
from memory_service.api.body_size import BodySizeLimit
from memory_service.api.concurrency import ConcurrencyLimit
from memory_service.api.docs import install_docs
from memory_service.api.errors import install_error_handlers
from memory_service.api.keys import ApiKeyRing
from memory_service.api.metrics import AppMetrics
from memory_service.api.observability import RequestObservability
from memory_service.api.openapi import document_errors
from memory_service.api.routes import (
    chat,
    maintenance,
    me,
    memories,
    sessions,
    transfer,
    usage,
    users,
)
from memory_service.api.routes.metrics import metrics_router
from memory_service.api.schemas.common import Health
from memory_service.api.ui import install_ui
from memory_service.config.settings import ObservabilitySettings
from memory_service.services.container import Services
from memory_service.services.work import build_maintenance

ROUTERS = [
    memories.router,
    sessions.router,
    maintenance.router,
    chat.router,
    usage.router,
    transfer.router,
    users.router,
    me.router,
]


def create_app(
    services: Services,
    key_ring: ApiKeyRing,
    *,
    observability: ObservabilitySettings | None = None,
) -> FastAPI:
    """The app over ``services``; ``observability`` replaces the settings' section (the
    benchmark serves one app with metrics and the access log, one without, side by side)."""
    app = FastAPI(
        title="memory-service",
        version=__version__,
        description="Long-term memory for LLM agents: record facts, recall them by hybrid "
        "search (BM25 + dense vectors, fused by their standardised scores with session "
        "neighbours and date terms; plain Reciprocal Rank Fusion is the rrf-plain preset), and "
        "keep each session's short-term memory. Every call is scoped to the tenant of its "
        "API key.",
        docs_url=None,  # install_docs: Swagger UI from the package, not a CDN
        redoc_url=None,
    )
    app.state.services = services
    app.state.key_ring = key_ring
    app.state.maintenance = build_maintenance(services)
    install_error_handlers(app)
    api = services.settings.api
    app.add_middleware(
        BodySizeLimit,
        max_bytes=api.max_body_bytes,
        per_path={transfer.IMPORT_PATH: api.max_import_bytes},
    )
    app.add_middleware(
        ConcurrencyLimit,
        max_requests=api.max_concurrent_requests,
        max_waiting=api.max_waiting_requests,
    )
    observability = observability or services.settings.observability
    app.state.metrics = AppMetrics(services.describe_backend()) if observability.metrics else None
    app.add_middleware(  # outermost: it sees the 413s and 503s too
        RequestObservability, metrics=app.state.metrics, log_requests=observability.access_log
    )

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        # on the event loop, not the thread pool: no I/O here, and a pool busy with requests
        # (or waiting for turns) must not make a load balancer's probe wait
        return Health(status="ok", backend=services.describe_backend(), version=__version__)

    for router in ROUTERS:
        # The resource routes as they are, shared by every app of the process: an included
        # router's routes are built again for each app on its first request (a cost every
        # test's app paid: ``benchmarks/RESULTS.md``, "Costs behind the code's choices"), a
        # route added as it is was built once, when its module was imported. Its router gave it
        # its prefix and its dependencies (``resource_router``).
        app.router.routes.extend(router.routes)
    if app.state.metrics is not None:
        app.router.routes.extend(
            metrics_router(require_key=observability.metrics_require_key).routes
        )
    install_docs(app)
    install_ui(app)
    document_errors(app)
    return app
