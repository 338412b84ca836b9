"""The memory tools an agent can call: ``memory_search``, ``memory_get``, ``memory_save``,
``session_search``, and the keyed tools (facts addressed by a key) ``memory_extract``,
``memory_recall``, ``memory_consolidate`` and ``memory_prune``.

``arguments`` holds one pydantic model per tool (its OpenAI schema and its validation),
``paths`` the rules for which files the model may read, ``memory_tools`` the tools themselves.
"""

from memory_service.tools.arguments import (
    TOOL_ARGUMENTS,
    MemoryConsolidateArgs,
    MemoryExtractArgs,
    MemoryGetArgs,
    MemoryPruneArgs,
    MemoryRecallArgs,
    MemorySaveArgs,
    MemorySearchArgs,
    SessionSearchArgs,
    ToolArguments,
)
from memory_service.tools.formatting import ToolOutcome, format_recall
from memory_service.tools.memory_files import memory_path_parts
from memory_service.tools.memory_tools import MemoryTools

__all__ = [
    "TOOL_ARGUMENTS",
    "MemoryConsolidateArgs",
    "MemoryExtractArgs",
    "MemoryGetArgs",
    "MemoryPruneArgs",
    "MemoryRecallArgs",
    "MemorySaveArgs",
    "MemorySearchArgs",
    "MemoryTools",
    "SessionSearchArgs",
    "ToolArguments",
    "ToolOutcome",
    "format_recall",
    "memory_path_parts",
]
