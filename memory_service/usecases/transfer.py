"""Export: a tenant's facts (or one user's) as the records ``pipeline.transfer`` writes as
JSON lines. Who may ask for which is the caller's key (``Principal.user_for``); the ids and
what the backend can list are checked here, before the first line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memory_service.pipeline.transfer import check_ids, export_pages, export_users
from memory_service.usecases.base import Memories


@dataclass(frozen=True, slots=True)
class ExportFacts:
    """Every fact of ``tenant_id`` (None ``user_id``: every user, then the shared memory), or
    of one user's own memory, inactive facts included."""

    tenant_id: str
    user_id: str | None = None

    def __post_init__(self) -> None:
        check_ids(self.tenant_id, self.user_id)  # invalid_id, before any model loads


def export_facts(memories: Memories, request: ExportFacts) -> Iterator[list[dict[str, Any]]]:
    """The records, one backend page at a time; the owners are listed now, so a backend that
    cannot list a tenant's users fails before the first page (``no_users``)."""
    owners = export_users(memories.longterm, request.tenant_id, request.user_id)
    return export_pages(memories.longterm, request.tenant_id, owners)
