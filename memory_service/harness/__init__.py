"""The agent-call harness: one user message in, the reply out, memory hooked in at every step.

``runner`` runs the call, ``prompt`` builds its system prompt, ``loop`` is the model/tool
loop, ``outcome`` holds what a call returns. The composition root (``services.build_harness``)
builds one ``MemoryHarness`` per request.
"""

from memory_service.harness.loop import OUT_OF_TOOL_CALLS
from memory_service.harness.outcome import ChatOutcome, MemoryPrompt, RecalledFact, Turn
from memory_service.harness.prompt import DEFAULT_INSTRUCTIONS, TOOLS_NOTE, PromptBuilder
from memory_service.harness.runner import MemoryHarness

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "OUT_OF_TOOL_CALLS",
    "TOOLS_NOTE",
    "ChatOutcome",
    "MemoryHarness",
    "MemoryPrompt",
    "PromptBuilder",
    "RecalledFact",
    "Turn",
]
