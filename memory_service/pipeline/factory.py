"""Maintenance built from Settings and the running services, for serve, the CLI and the API."""

from __future__ import annotations

from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance
from memory_service.services import Services


def build_maintenance(services: Services) -> MemoryMaintenance:
    memory = services.settings.memory
    consolidator = Consolidator(
        model=services.memory_model,
        max_tokens=memory.consolidation_max_tokens,
        prompt=memory.consolidation_prompt,
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
        ),
    )
