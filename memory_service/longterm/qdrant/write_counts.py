"""Per shared owner, the writes an engine made that touched it (``CountsSharedWrites``): what
``scope_mirror`` checks before it scores a held scope again."""

from __future__ import annotations

import threading

from memory_service.longterm.qdrant.filters import OwnerFilter, OwnerKey
from memory_service.longterm.qdrant.layout import SCOPE_FIELD


class SharedWrites:
    """``CountsSharedWrites``'s counts: per shared owner, the writes that touched it."""

    def __init__(self) -> None:
        self._counts: dict[OwnerKey, int] = {}
        self._lock = threading.Lock()

    def of(self, scope: OwnerFilter) -> int:
        return self._counts.get(scope.owner_key(), 0)

    def add(self, owners: set[OwnerKey]) -> None:
        """Count a landed write for each shared owner among ``owners`` (a user's are not
        counted: nothing reads them from memory)."""
        with self._lock:
            for owner in owners:
                if owner[1][0] == SCOPE_FIELD:
                    self._counts[owner] = self._counts.get(owner, 0) + 1
