"""Long-term memory: the protocol, the optional capabilities, and the backends (files, Qdrant).

Backends extend ``longterm.store.BaseLongTermMemory``; the retrieval strategy is in config.
"""

from memory_service.longterm.base import (
    ArchivesLedgers,
    ListsUsers,
    LongTermMemory,
    SettlesLedgers,
)

__all__ = ["ArchivesLedgers", "ListsUsers", "LongTermMemory", "SettlesLedgers"]
