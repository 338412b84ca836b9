"""Runs maintenance for every user (and shared scope) on a schedule (default every 6 hours)
inside ``serve``, and a sweep every few minutes: expired session states purged, idle sessions
flushed.

Who exists is asked of the workspace (tenant and user folders), of the long-term backend
and of the state stores in PostgreSQL (``ListsUsers``: the backend, sessions, dead
letters, maintenance markers), so users whose data lives only in Qdrant or PostgreSQL are
maintained too. Each user is
still subject to ``MemoryMaintenance``'s per-user lock and minimum gap, so several processes
running this scheduler never maintain one user twice at once.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.paths import WorkspacePaths, id_folders
from memory_service.longterm.protocol import CompactsDeleted, ListsAgents, LongTermMemory
from memory_service.observe.progress import Progress
from memory_service.observe.tracing import new_trace, using_trace
from memory_service.pipeline.idle_flush import IdleFlusher, IdleFlushReport
from memory_service.pipeline.maintenance import MaintenanceReport, MemoryMaintenance
from memory_service.stores.user_data import ListsUsers

log = logging.getLogger(__name__)


def known_users(
    workspace: Path,
    longterm: object,
    tenants: Iterable[str] = (),
    *,
    state: Iterable[ListsUsers] = (),
) -> Iterator[RuntimeContext]:
    """Every (tenant, user) with a folder in the workspace, facts in the backend or data in
    a ``state`` store, then the tenant's shared memories (each agent's, the tenant's own)
    that have a folder or facts."""
    where = WorkspacePaths(workspace)
    stores = [*state, *([longterm] if isinstance(longterm, ListsUsers) else [])]
    all_tenants = set(tenants) | set(id_folders(where.tenants_dir))
    for store in stores:
        all_tenants |= set(store.tenants())
    for tenant in sorted(all_tenants):
        yield from tenant_owners(where, longterm, tenant, stores)


def tenant_owners(
    where: WorkspacePaths, longterm: object, tenant: str, stores: Iterable[ListsUsers]
) -> Iterator[RuntimeContext]:
    """One tenant's users (a folder in the workspace, or data in one of ``stores``), in
    order, then its shared scopes that hold something."""
    users = set(id_folders(where.users_dir(tenant)))
    for store in stores:
        users |= set(store.users(tenant))
    for user in sorted(users):
        yield RuntimeContext(tenant, user)
    yield from shared_scopes(where, longterm, tenant)


def shared_scopes(where: WorkspacePaths, longterm: object, tenant: str) -> Iterator[RuntimeContext]:
    """The tenant's agent and tenant scopes that hold something (a folder, or a fact)."""
    agents = set(id_folders(where.agents_dir(tenant)))
    if isinstance(longterm, ListsAgents):
        agents |= set(longterm.agents(tenant))
    for agent in sorted(agents):
        yield scope_context(tenant, "agent", agent)
    shared = scope_context(tenant, "tenant")
    if where.shared_dir(tenant).is_dir() or (
        isinstance(longterm, LongTermMemory)
        and longterm.list(shared, limit=1, include_inactive=True).items
    ):
        yield shared


def run_all(
    maintenance: MemoryMaintenance,
    contexts: Iterable[RuntimeContext],
    *,
    force: bool = False,
    progress: bool = True,
    consolidate: bool = True,
) -> list[MaintenanceReport]:
    """Maintain each context in turn; one user's failure never stops the others."""
    targets = list(contexts)
    bar = Progress(len(targets), "maintenance", enabled=progress)
    reports = []
    try:
        for ctx in targets:
            failed = MaintenanceReport.of(ctx, "failed")
            bar.stage(f"{ctx.tenant_id}/{failed.owner}")
            try:
                reports.append(maintenance.run_user(ctx, force=force, consolidate=consolidate))
            except Exception as exc:  # noqa: BLE001 - reported per user, never fatal
                log.exception("maintenance failed for %s/%s", ctx.tenant_id, failed.owner)
                failed.error = str(exc)
                reports.append(failed)
            bar.update()
    finally:
        bar.close()
    longterm = maintenance.longterm
    if isinstance(longterm, CompactsDeleted) and longterm.compact_deleted():
        log.info("maintenance: deleted facts' text rewritten out of the long-term store")
    return reports


@dataclass(slots=True)
class SweepReport:
    """One sweep: expired session states purged, and the idle flush's counts."""

    purged: int = 0
    idle: IdleFlushReport | None = None


class MemoryMaintenanceScheduler:
    """A daemon thread with two clocks: a maintenance pass after ``first_delay`` and then
    every ``interval``; a sweep (expired session states purged through the store, idle
    sessions flushed) every ``sweep_interval``. ``maintain=False`` (memory hooks disabled)
    schedules no passes at all: the memory pipeline then writes neither the daily ledgers nor
    MEMORY.md by itself (an explicit ``maintain`` still runs them)."""

    def __init__(
        self,
        maintenance: MemoryMaintenance,
        contexts: Callable[[], Iterable[RuntimeContext]],
        *,
        interval: timedelta = timedelta(hours=6),
        first_delay: timedelta = timedelta(minutes=1),
        maintain: bool = True,
        purge: Callable[[], int] | None = None,
        idle_flush: IdleFlusher | None = None,
        sweep_interval: timedelta = timedelta(minutes=5),
    ) -> None:
        self.maintenance = maintenance
        self.contexts = contexts
        self.interval = interval
        self.first_delay = first_delay
        self.maintain = maintain
        self.purge = purge
        self.idle_flush = idle_flush
        self.sweep_interval = sweep_interval
        self.passes = 0
        self.sweeps = 0
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
        """One pass, under a trace of its own (its log lines share one ``trace_id``); none
        while the memory hooks are disabled."""
        if not self.maintain:
            return []
        with using_trace(new_trace()):
            reports = run_all(self.maintenance, self.contexts(), progress=False)
            self.passes += 1
            ran = sum(1 for r in reports if r.status == "ran")
            log.info("maintenance pass %d: %d users, %d maintained", self.passes, len(reports), ran)
        return reports

    def sweep_once(self) -> SweepReport:
        """Purge expired session states, then flush the sessions that went quiet (under a
        trace of its own, like a pass)."""
        report = SweepReport()
        with using_trace(new_trace()):
            if self.purge is not None:
                try:
                    report.purged = self.purge()
                except Exception:  # noqa: BLE001 - the flush below must still run
                    log.exception("purging expired session states failed")
            if self.idle_flush is not None:
                users = (c for c in self.contexts() if c.scope == "user")  # sessions are users'
                report.idle = self.idle_flush.run(users)
            self.sweeps += 1
            if report.purged or (report.idle and report.idle.sessions):
                log.info("sweep %d: %s", self.sweeps, report)
        return report

    def _loop(self) -> None:
        first = time.monotonic() + self.first_delay.total_seconds()
        due = {"pass": first, "sweep": first}
        every = {"pass": self.interval, "sweep": self.sweep_interval}
        jobs = {"pass": self.run_once, "sweep": self.sweep_once}
        if self.purge is None and self.idle_flush is None:
            del due["sweep"]
        if not self.maintain:
            del due["pass"]
        if not due:
            return
        while not self._stop.wait(max(0.0, min(due.values()) - time.monotonic())):
            for name in [n for n, at in due.items() if at <= time.monotonic()]:
                try:
                    jobs[name]()
                except Exception:  # noqa: BLE001 - the schedule must survive a bad pass
                    log.exception("scheduled %s failed", name)
                due[name] = time.monotonic() + every[name].total_seconds()
