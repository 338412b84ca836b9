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

    def last_run(self, ctx: RuntimeContext) -> datetime | None:
        """When maintenance last ran for ``ctx``'s owner; None when it never did (or the
        marker is unreadable)."""
        ...

    def remember(self, ctx: RuntimeContext, now: datetime, report: dict[str, Any]) -> None:
        """Record that a run for ``ctx``'s owner finished at ``now``, with its ``report``."""
        ...

    def lock(self, ctx: RuntimeContext) -> AbstractContextManager[bool]:
        """Held for one run; yields False (holding nothing) when another run holds it."""
        ...

    def count_user(self, ctx: RuntimeContext) -> int:
        """The user's maintenance marker: 0 or 1."""
        ...

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's marker, after a run in progress (waiting up to
        ``ERASE_WAIT_S``); 0 or 1."""
        ...
