"""Usage counters in ``tenants/<tenant>/usage.json``, rewritten atomically under a lock, so
several processes can share a workspace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memory_service.domain.facts import utcnow
from memory_service.domain.paths import lock_for, tenant_usage_file
from memory_service.llm import Usage
from memory_service.stores.fsutil import ensure_dir, file_lock, read_text, write_atomically
from memory_service.stores.usage import (
    _FIELDS,
)

log = logging.getLogger(__name__)


class FilesUsageStore:
    """Adds to and reads the per-tenant usage files of one workspace."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)

    def record(
        self,
        tenant_id: str,
        *,
        tokens: Mapping[str, Usage] | None = None,
        counters: Mapping[str, int] | None = None,
    ) -> None:
        """Add ``tokens`` (purpose -> one call's usage) and ``counters`` in one write."""
        tokens = {p: u for p, u in (tokens or {}).items() if u is not None}
        counters = {k: v for k, v in (counters or {}).items() if v}
        if not tokens and not counters:
            return
        path = tenant_usage_file(self.workspace, tenant_id)
        ensure_dir(path.parent)
        with file_lock(lock_for(path), timeout=30):
            data = self._read(path, tenant_id)
            for purpose, usage in tokens.items():
                row = data["tokens"].setdefault(purpose, dict.fromkeys(_FIELDS, 0))
                row["calls"] += 1
                for name, value in usage.to_dict().items():
                    row[name] = row.get(name, 0) + value
            for name, value in counters.items():
                data["counters"][name] = data["counters"].get(name, 0) + value
            data["updated_at"] = utcnow().isoformat()
            write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def report(self, tenant_id: str) -> dict[str, Any]:
        """The tenant's totals: ``tokens`` by purpose plus ``total``, and ``counters``."""
        data = self._read(tenant_usage_file(self.workspace, tenant_id), tenant_id)
        total = dict.fromkeys(_FIELDS, 0)
        for row in data["tokens"].values():
            for name in _FIELDS:
                total[name] += int(row.get(name, 0))
        return {**data, "total": total}

    @staticmethod
    def _read(path: Path, tenant_id: str) -> dict[str, Any]:
        try:
            data = json.loads(read_text(path) or "{}")
        except ValueError:  # writes are atomic: only a hand edit breaks it; keep serving calls
            log.warning("%s is not JSON; usage counting starts over", path)
            data = {}
        if not isinstance(data, dict):
            data = {}
        return {
            "tenant_id": tenant_id,
            "tokens": dict(data.get("tokens") or {}),
            "counters": dict(data.get("counters") or {}),
            "updated_at": data.get("updated_at"),
        }
