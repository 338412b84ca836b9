"""Long-term memory: the protocol, retrieval strategy, and the backends."""

from memory_service.longterm.base import LongTermMemory, RetrievalMode
from memory_service.longterm.retrieval import PRESETS, RetrievalConfig

__all__ = ["LongTermMemory", "RetrievalMode", "RetrievalConfig", "PRESETS"]
