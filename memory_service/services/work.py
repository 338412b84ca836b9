"""The work built on the running services: maintenance, ``serve``'s scheduler and the
harness of one agent call (cheap: one per request)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta

from memory_service.domain.errors import BackendUnavailableError
from memory_service.harness.runner import MemoryHarness
from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.idle_flush import IdleFlusher
from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance
from memory_service.pipeline.scheduler import MemoryMaintenanceScheduler
from memory_service.services.container import Services
from memory_service.services.stores import build_expiry


def build_maintenance(services: Services) -> MemoryMaintenance:
    """Maintenance over the running services (serve's scheduler, the CLI, the API)."""
    memory = services.settings.memory
    model = services.memory_model  # MEMORY_MEMORY__MODEL, if set, names the model to use
    consolidator = Consolidator(
        model=model.with_model(memory.model) if model is not None else None,
        max_tokens=memory.consolidation_max_tokens,
        prompt=memory.consolidation_prompt,
        docs=services.memory_docs,
    )
    return MemoryMaintenance(
        longterm=services.longterm,
        workspace=services.settings.workspace,
        consolidator=consolidator,
        settings=MaintenanceSettings(
            min_gap=memory.consolidation_min_gap,
            daily_file_retention_days=memory.daily_file_retention_days,
            session_retention_days=memory.session_retention_days,
            near_duplicate_distance=memory.near_duplicate_distance,
            expiry=build_expiry(services.settings),
        ),
        session_logs=services.shortterm.log if services.shortterm is not None else None,
        **services.state.maintenance_stores(),
    )


def build_scheduler(
    services: Services,
    maintenance: MemoryMaintenance,
    tenants: Callable[[], Iterable[str]] = tuple,
) -> MemoryMaintenanceScheduler:
    """``serve``'s background work: maintenance passes (none when ``disable_memory_hooks`` is
    on), the TTL purge of session states, and the idle flush of sessions that went quiet
    (``idle_flush_minutes``; needs the flush's model; off with the hooks too)."""
    memory = services.settings.memory
    hooks = not memory.disable_memory_hooks
    idle = None
    shortterm, flush = services.shortterm, services.flush
    if hooks and memory.idle_flush_minutes and shortterm and flush and flush.model:
        idle = IdleFlusher(shortterm, flush, idle=timedelta(minutes=memory.idle_flush_minutes))
    return MemoryMaintenanceScheduler(
        maintenance,
        lambda: services.known_users(tenants()),
        interval=timedelta(hours=memory.maintenance_interval_hours),
        maintain=hooks,
        purge=shortterm.purge_expired if shortterm is not None else None,
        idle_flush=idle,
        sweep_interval=timedelta(minutes=memory.sweep_interval_minutes),
    )


def build_harness(services: Services) -> MemoryHarness:
    """The harness over the running services (cheap: build one per request)."""
    if services.shortterm is None:
        raise BackendUnavailableError("the chat endpoint needs short-term memory")
    return MemoryHarness(
        model=services.chat_model,
        shortterm=services.shortterm,
        longterm=services.longterm,
        workspace=services.settings.workspace,
        config=services.settings.memory,
        flush=services.flush,
        usage=services.state.usage,
        maintenance=build_maintenance(services),  # memory_consolidate and memory_prune
        docs=services.memory_docs,
    )
