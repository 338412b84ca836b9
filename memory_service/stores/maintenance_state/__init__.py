"""Where maintenance remembers its last run per user and takes its per-user lock.

``MaintenanceState`` is the narrow interface maintenance (``pipeline/maintenance.py``) uses:
the last run (so the minimum gap survives restarts), a non-blocking per-user lock (two
processes never maintain one user at once: the second reports ``busy``), and erasure's count
and erase of the marker. ``FilesMaintenanceState`` (``files.py``) keeps both in the user's
folder, the single-node default; ``PostgresMaintenanceState`` (``postgres.py``) keeps them in
PostgreSQL (a row and an advisory lock) for replicas.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from memory_service.domain.context import RuntimeContext

ERASE_WAIT_S = 120  # an erase waits this long for a run in progress


class MaintenanceState(Protocol):
    """The per-user marker and lock of maintenance (see the module)."""

    def last_run(self, ctx: RuntimeContext) -> datetime | None: ...

    def remember(self, ctx: RuntimeContext, now: datetime, report: dict[str, Any]) -> None: ...

    def lock(self, ctx: RuntimeContext) -> AbstractContextManager[bool]:
        """Held for one run; yields False (holding nothing) when another run holds it."""
        ...

    def count_user(self, ctx: RuntimeContext) -> int: ...

    def erase_user(self, ctx: RuntimeContext) -> int: ...
