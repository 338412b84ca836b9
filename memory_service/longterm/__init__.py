"""Long-term memory: the protocol and the backends (the retrieval strategy is in config)."""

from memory_service.longterm.base import LongTermMemory

__all__ = ["LongTermMemory"]
