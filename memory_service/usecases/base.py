"""What the use cases act on: one service's two memories and where its MEMORY.md files live
(``services.Services.memories`` builds it; the memory tools build their own)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memory_service.domain.errors import BackendUnavailableError
from memory_service.longterm.protocol import LongTermMemory
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.memory_docs import MemoryDocs


@dataclass(frozen=True, slots=True)
class Memories:
    """Long-term memory, short-term memory (None: not configured), the workspace and
    MEMORY.md's documents (None: the workspace's files)."""

    longterm: LongTermMemory
    workspace: Path
    shortterm: ShortTermMemory | None = None
    docs: MemoryDocs | None = None

    def sessions(self) -> ShortTermMemory:
        """Short-term memory, or 503 ``unavailable`` where this service has none."""
        if self.shortterm is None:
            raise BackendUnavailableError(
                "short-term memory is not configured in this service", code="unavailable"
            )
        return self.shortterm
