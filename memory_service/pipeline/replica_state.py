"""The state stores a replica keeps beside its memories, built together over one place:
the erased users' tombstones, tenant usage, the flush's dead letters and maintenance's
per-user marker and lock.

``ReplicaState.of(workspace, database)``: with no database (the single-node default) each
lives in the workspace as it always has; with one (``MEMORY_STATE__BACKEND=postgres``, the
composition root passes ``Services.database``) each lives in PostgreSQL, so replicas behind
a load balancer share them and none of it is on a replica's disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_service.pgdb import Database
from memory_service.pipeline.dead_letters import DeadLetterStore, FlushDeadLetters
from memory_service.pipeline.erasure import UserData
from memory_service.pipeline.maintenance_state import MaintenanceFiles, MaintenanceState
from memory_service.pipeline.scheduler import KnowsUsers
from memory_service.tombstones import Tombstones
from memory_service.usage import UsageLedger, UsageStore


@dataclass(frozen=True, slots=True)
class ReplicaState:
    tombstones: Tombstones
    usage: UsageStore
    dead_letters: DeadLetterStore
    maintenance: MaintenanceState
    in_postgres: bool = False

    @classmethod
    def of(cls, workspace: Path, database: Database | None = None) -> ReplicaState:
        """Every store in the workspace, or (``database`` given) every store in PostgreSQL;
        the tables are created when missing."""
        if database is None:
            tombstones = Tombstones(workspace)
            return cls(
                tombstones,
                UsageLedger(workspace),
                FlushDeadLetters(workspace, tombstones),
                MaintenanceFiles(workspace),
            )
        from memory_service.pipeline.dead_letters_pg import PgFlushDeadLetters
        from memory_service.pipeline.maintenance_state_pg import PgMaintenanceState
        from memory_service.usage.postgres import PgUsageLedger

        tombstones = Tombstones(workspace, database=database)
        return cls(
            tombstones,
            PgUsageLedger(database),
            PgFlushDeadLetters(database, tombstones),
            PgMaintenanceState(database),
            in_postgres=True,
        )

    def flush_stores(self) -> dict[str, Any]:
        """``MemoryFlushManager``'s keyword arguments for these stores."""
        return {"usage": self.usage, "dead_letters": self.dead_letters}

    def maintenance_stores(self) -> dict[str, Any]:
        """``MemoryMaintenance``'s keyword arguments for these stores."""
        return {"usage": self.usage, "state": self.maintenance, "tombstones": self.tombstones}

    def user_sources(self, *others: object) -> list[KnowsUsers]:
        """The stores (these, and ``others`` such as the session store) that name users
        without workspace folders, for ``scheduler.known_users``."""
        stores = (self.dead_letters, self.maintenance, *others)
        return [store for store in stores if isinstance(store, KnowsUsers)]

    def left_in_workspace(self, workspace: Path) -> list[tuple[str, UserData]]:
        """With PostgreSQL state, the workspace's own stores of the same data, which an erase
        still empties (kept there before the switch); none otherwise."""
        if not self.in_postgres:
            return []
        return [
            ("dead_letters.files", FlushDeadLetters(workspace)),
            ("maintenance.files", MaintenanceFiles(workspace)),
        ]
