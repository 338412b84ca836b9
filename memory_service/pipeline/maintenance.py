"""Scheduled maintenance of one user's (or one shared scope's) long-term memory, step by step.

Steps, in order: exact duplicates (repeated ledger bullets), near-duplicates (SimHash), newest
wins per key, expired facts (``ExpiryPolicy``), daily ledgers past retention to
``memory/archive/``, session logs past retention deleted, temp files that killed writes left
in the user's folder removed, then consolidation into MEMORY.md. The decisions are the pure
rules of ``policy.py``; this module applies them to whichever backend is configured: a
backend with append-only ledgers (``JournalsDecisions``: files) journals them beside its
ledgers, whose lines stay as written; any other closes and deletes (Qdrant).

Two processes never maintain the same user at once (a non-blocking lock per user), and a
user is maintained at most once per ``min_gap`` unless forced; the last run is remembered so
the gap survives restarts. Both live in ``maintenance_state.py``: the user's folder by
default, PostgreSQL (a row and an advisory lock) for replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from indexing.hashing import content_hash
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError, UserErasedError
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact, fact_id, utcnow
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.fact_files import parse_fact_file
from memory_service.longterm.protocol import (
    ArchivesFactFiles,
    JournalsDecisions,
    LongTermMemory,
    SettlesStoredFacts,
)
from memory_service.observe.telemetry import sink
from memory_service.observe.tracing import using_ids
from memory_service.pipeline.consolidation import ConsolidationResult, Consolidator
from memory_service.pipeline.erasure import erase_facts
from memory_service.pipeline.policy import plan_maintenance, plan_prune
from memory_service.stores.fsutil import remove_stale_temp_files
from memory_service.stores.maintenance_state import MaintenanceState
from memory_service.stores.maintenance_state.files import FilesMaintenanceState
from memory_service.stores.shortterm.session_logs import SessionLogStore
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones
from memory_service.stores.usage import RECORD_ERRORS, UsageStore
from memory_service.stores.usage.files import FilesUsageStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MaintenanceSettings:
    min_gap: timedelta = timedelta(minutes=30)
    daily_file_retention_days: int = 90
    session_retention_days: int = 180
    near_duplicate_distance: int = 3
    expiry: ExpiryPolicy = field(default_factory=ExpiryPolicy)
    # An atomic write holds its temp file for milliseconds: one this old is a killed write's.
    stale_temp_age: timedelta = timedelta(hours=1)


@dataclass(slots=True)
class MaintenanceReport:
    """What one run did for one user (or one shared scope: ``scope`` agent | tenant, with
    ``user_id`` None): ``status`` ran | skipped_recent | busy | failed."""

    tenant_id: str
    user_id: str | None
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    consolidation: ConsolidationResult | None = None
    error: str | None = None
    scope: str = "user"
    agent_id: str | None = None

    @classmethod
    def of(cls, ctx: RuntimeContext, status: str, **fields) -> MaintenanceReport:
        user = ctx.user_id if ctx.scope == "user" else None
        agent = ctx.agent_id if ctx.scope == "agent" else None
        return cls(ctx.tenant_id, user, status, scope=ctx.scope, agent_id=agent, **fields)

    @property
    def owner(self) -> str:
        """Whose memory, for messages: the user id, ``agent:<id>`` or ``tenant``."""
        if self.scope == "agent":
            return f"agent:{self.agent_id}"
        return "tenant" if self.scope == "tenant" else str(self.user_id)

    def to_dict(self) -> dict:
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "scope": self.scope,
            "agent_id": self.agent_id,
            "status": self.status,
            "counts": dict(self.counts),
            "consolidation": self.consolidation.to_dict() if self.consolidation else None,
            "error": self.error,
        }


def all_facts(memory: LongTermMemory, ctx: RuntimeContext) -> list[Fact]:
    """Every fact of the user, active or not, paging through ``list``."""
    facts: list[Fact] = []
    cursor = None
    while True:
        page = memory.list(ctx, limit=1000, cursor=cursor, include_inactive=True)
        facts += page.items
        cursor = page.next_cursor
        if cursor is None:
            return facts


class MemoryMaintenance:
    """Runs the maintenance steps for one user at a time over the configured backends."""

    def __init__(
        self,
        *,
        longterm: LongTermMemory,
        workspace,
        consolidator: Consolidator,
        settings: MaintenanceSettings | None = None,
        usage: UsageStore | None = None,
        state: MaintenanceState | None = None,
        tombstones: Tombstones | None = None,
        clock: Callable[[], datetime] = utcnow,
        session_logs: SessionLogStore | None = None,
    ) -> None:
        self.longterm = longterm
        self.workspace = workspace
        self.session_logs = session_logs or FilesSessionLogStore(workspace)  # the retention step's
        self.usage = usage or FilesUsageStore(workspace)
        self.state = state or FilesMaintenanceState(workspace)
        self.tombstones = tombstones or FilesTombstones(workspace)
        self.consolidator = consolidator
        self.settings = settings or MaintenanceSettings()
        self._clock = clock

    def run_user(
        self, ctx: RuntimeContext, *, force: bool = False, consolidate: bool = True
    ) -> MaintenanceReport:
        """Every step for one user; ``consolidate=False`` leaves MEMORY.md alone (the
        scheduler's passes when ``disable_memory_hooks`` is on). Runs under the trace ``ctx``
        carries, else the current one."""
        with using_ids(ctx.trace_id, ctx.span_id):
            try:
                report = self._run_user(ctx, force=force, consolidate=consolidate)
            except Exception:
                sink().pipeline("maintenance", "failed")  # the caller logs and reports it
                raise
            sink().pipeline("maintenance", report.status)
            log.info(
                "maintenance of %s/%s: %s",
                ctx.tenant_id,
                ctx.user_id,
                report.status,
                extra={"tenant_id": ctx.tenant_id, "user_id": ctx.user_id, "status": report.status},
            )
        return report

    def _run_user(
        self, ctx: RuntimeContext, *, force: bool, consolidate: bool
    ) -> MaintenanceReport:
        paths = OwnerPaths.of(self.workspace, ctx)
        report = MaintenanceReport.of(ctx, "ran")
        tombstones = self.tombstones
        if tombstones.refuses(ctx):  # erased since this pass began: nothing to maintain
            report.status = "erased"
            return report
        now = self._clock()
        last = self.state.last_run(ctx)
        if not force and last is not None and now - last < self.settings.min_gap:
            report.status = "skipped_recent"
            return report
        try:
            with self.state.lock(ctx) as alone:
                if not alone:
                    report.status = "busy"
                    return report
                self._run_steps(ctx, paths, now, report, consolidate=consolidate)
                tombstones.check(ctx)  # under the lock an erase takes too
                self.state.remember(ctx, now, report.to_dict())
        except UserErasedError:
            report.status = "erased"
        return report

    def count_user(self, ctx: RuntimeContext) -> int:
        """The user's maintenance marker (0 or 1)."""
        return self.state.count_user(ctx)

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's maintenance marker, after a run in progress; 0 or 1."""
        return self.state.erase_user(ctx)

    def _run_steps(
        self,
        ctx: RuntimeContext,
        paths: OwnerPaths,
        now: datetime,
        report: MaintenanceReport,
        *,
        consolidate: bool = True,
    ) -> None:
        counts = report.counts
        longterm = self.longterm
        settled = (
            longterm.settle_stored_facts(ctx) if isinstance(longterm, SettlesStoredFacts) else {}
        )
        counts["exact_duplicates"] = settled.get("exact_duplicates", 0)

        protected = frozenset(self._consolidated_ids(ctx, paths))
        plan = plan_maintenance(
            all_facts(self.longterm, ctx),
            now,
            expiry=self.settings.expiry,
            near_duplicate_distance=self.settings.near_duplicate_distance,
            protected_ids=protected,
        )
        if isinstance(longterm, JournalsDecisions):  # append-only ledgers: decisions beside
            if not plan.is_empty():
                longterm.journal_decisions(ctx, plan.settlements())
        else:
            if plan.update:
                self.longterm.update(ctx, list(plan.update.values()))
            if plan.delete:
                self.longterm.delete(ctx, sorted(plan.delete))
        counts.update(plan.counts)
        counts["superseded"] += settled.get("superseded", 0)

        cutoff = (now - timedelta(days=self.settings.daily_file_retention_days)).date()
        archives = isinstance(longterm, ArchivesFactFiles)
        counts["ledgers_archived"] = longterm.archive_fact_files(ctx, cutoff) if archives else 0
        removed_logs = self.session_logs.delete_old(
            ctx, retention_days=self.settings.session_retention_days, now=now
        )
        counts["session_logs_deleted"] = len(removed_logs)
        stale = remove_stale_temp_files(
            paths.root, older_than=self.settings.stale_temp_age, now=now
        )
        counts["stale_temp_files_removed"] = len(stale)

        if not consolidate:
            counts["consolidated"] = 0
            return
        try:
            result = self.consolidator.consolidate(
                paths, all_facts(self.longterm, ctx), now, ctx=ctx
            )
        except UserErasedError:
            raise  # erased meanwhile: the run stops (see ``run_user``)
        except Exception as exc:  # the LLM failed: MEMORY.md is untouched, report it
            sink().pipeline("consolidation", "failed")
            log.warning("consolidation failed for %s/%s: %s", ctx.tenant_id, report.owner, exc)
            report.status = "failed"
            report.error = f"consolidation: {exc}"
            return
        report.consolidation = result
        sink().pipeline("consolidation", "ok")
        counts["consolidated"] = 1 if result.written else 0
        self._account(ctx, result)

    def _account(self, ctx: RuntimeContext, result: ConsolidationResult) -> None:
        """An LLM consolidation's tokens go to the tenant's usage file, like every call."""
        if result.usage is None:
            return
        try:
            self.usage.record(
                ctx.tenant_id,
                tokens={"consolidation": result.usage},
                counters={"consolidation_runs": 1},
            )
        except RECORD_ERRORS as exc:
            log.warning("could not record consolidation usage for %s: %s", ctx.tenant_id, exc)

    # -- on request (the memory_consolidate and memory_prune tools) ----------------------

    def consolidate_user(self, ctx: RuntimeContext) -> ConsolidationResult:
        """Consolidate one user's MEMORY.md now, under the per-user maintenance lock (a
        running maintenance answers ``BackendUnavailableError`` ``busy``); usage counted."""
        paths = OwnerPaths.of(self.workspace, ctx)
        self.tombstones.check(ctx)  # before the folder is made again
        with self.state.lock(ctx) as alone:
            if not alone:
                raise BackendUnavailableError(
                    "maintenance is running for this user; try again in a minute", code="busy"
                )
            try:
                result = self.consolidator.consolidate(
                    paths, all_facts(self.longterm, ctx), self._clock(), ctx=ctx
                )
            except Exception:
                sink().pipeline("consolidation", "failed")
                raise
        sink().pipeline("consolidation", "ok")
        self._account(ctx, result)
        return result

    def prune_plan(
        self, ctx: RuntimeContext, *, max_importance: int | None = None
    ) -> list[tuple[Fact, str]]:
        """The facts ``prune`` would remove (``policy.plan_prune``), with why."""
        paths = OwnerPaths.of(self.workspace, ctx)
        return plan_prune(
            all_facts(self.longterm, ctx),
            self._clock(),
            expiry=self.settings.expiry,
            max_importance=max_importance,
            protected_ids=frozenset(self._consolidated_ids(ctx, paths)),
        )

    def prune(self, ctx: RuntimeContext, ids: list[str]) -> int:
        """Delete ``ids`` from the backend and from MEMORY.md (``erasure.erase_facts``)."""
        if not ids:
            return 0
        docs = self.consolidator.documents(self.workspace)
        return erase_facts(self.longterm, self.workspace, ctx, ids, docs=docs)

    def _consolidated_ids(self, ctx: RuntimeContext, paths: OwnerPaths) -> set[str]:
        """Facts whose text is a MEMORY.md bullet: consolidated facts do not expire."""
        text = self.consolidator.documents(self.workspace).read(ctx)
        return {
            fact_id(ctx.tenant_id, ctx.owner, content_hash(line.fact.text))
            for line in parse_fact_file(text, default_created_at=None)
        }
