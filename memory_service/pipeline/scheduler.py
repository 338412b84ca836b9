"""Runs maintenance for every user on a schedule (default every 6 hours) inside ``serve``.

Who exists is asked of the workspace (tenant and user folders) and of the long-term backend
(``users(tenant)``), so users whose facts live only in Qdrant are maintained too. Each user is
still subject to ``MemoryMaintenance``'s per-user lock and minimum gap, so several processes
running this scheduler never maintain one user twice at once.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path

from memory_service.context import RuntimeContext, validate_id
from memory_service.errors import InvalidIdError
from memory_service.longterm.base import ListsUsers
from memory_service.observe.tracing import new_trace, using_trace
from memory_service.paths import WorkspacePaths
from memory_service.pipeline.maintenance import MaintenanceReport, MemoryMaintenance
from memory_service.progress import Progress

log = logging.getLogger(__name__)


def _folders(path: Path) -> list[str]:
    if not path.is_dir():
        return []
    names = []
    for child in sorted(path.iterdir()):
        try:
            if child.is_dir() and not child.is_symlink():
                names.append(validate_id(child.name))
        except InvalidIdError:
            continue
    return names


def known_users(
    workspace: Path, longterm: object, tenants: Iterable[str] = ()
) -> Iterator[RuntimeContext]:
    """Every (tenant, user) with a folder in the workspace or facts in the backend."""
    where = WorkspacePaths(workspace)
    all_tenants = sorted(set(tenants) | set(_folders(where.tenants_dir)))
    for tenant in all_tenants:
        users = set(_folders(where.users_dir(tenant)))
        if isinstance(longterm, ListsUsers):
            users |= set(longterm.users(tenant))
        for user in sorted(users):
            yield RuntimeContext(tenant, user)


def run_all(
    maintenance: MemoryMaintenance,
    contexts: Iterable[RuntimeContext],
    *,
    force: bool = False,
    progress: bool = True,
) -> list[MaintenanceReport]:
    """Maintain each context in turn; one user's failure never stops the others."""
    targets = list(contexts)
    bar = Progress(len(targets), "maintenance", enabled=progress)
    reports = []
    try:
        for ctx in targets:
            bar.stage(f"{ctx.tenant_id}/{ctx.user_id}")
            try:
                reports.append(maintenance.run_user(ctx, force=force))
            except Exception as exc:  # noqa: BLE001 - reported per user, never fatal
                log.exception("maintenance failed for %s/%s", ctx.tenant_id, ctx.user_id)
                reports.append(
                    MaintenanceReport(ctx.tenant_id, ctx.user_id, "failed", error=str(exc))
                )
            bar.update()
    finally:
        bar.close()
    return reports


class MemoryMaintenanceScheduler:
    """A daemon thread: the first pass after ``first_delay``, then one every ``interval``."""

    def __init__(
        self,
        maintenance: MemoryMaintenance,
        contexts: Callable[[], Iterable[RuntimeContext]],
        *,
        interval: timedelta = timedelta(hours=6),
        first_delay: timedelta = timedelta(minutes=1),
    ) -> None:
        self.maintenance = maintenance
        self.contexts = contexts
        self.interval = interval
        self.first_delay = first_delay
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread in a copy of this context: the metrics sink current here (serve
        installs the app's) receives the passes' measurements."""
        if self._thread is None:
            context = contextvars.copy_context()
            self._thread = threading.Thread(
                target=context.run, args=(self._loop,), name="maintenance", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run_once(self) -> list[MaintenanceReport]:
        """One pass, under a trace of its own (its log lines share one ``trace_id``)."""
        with using_trace(new_trace()):
            reports = run_all(self.maintenance, self.contexts(), progress=False)
            self.passes += 1
            ran = sum(1 for r in reports if r.status == "ran")
            log.info("maintenance pass %d: %d users, %d maintained", self.passes, len(reports), ran)
        return reports

    def _loop(self) -> None:
        wait = self.first_delay.total_seconds()
        while not self._stop.wait(wait):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the schedule must survive a bad pass
                log.exception("maintenance pass failed")
            wait = self.interval.total_seconds()
