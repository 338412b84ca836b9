"""The model loop of one agent call: complete, run the tool calls it asks for, repeat, at most
``limit`` completions. The last completion is asked for without tools (``tool_choice=none``)
so a turn always ends with words; a refused or failing tool is a result for the model, not an
exception. Before every round after the first, ``before_round`` gives the context again (the
caller compacts the history there when the round would not fit); each tool result goes
through ``keep_result`` as it returns (a big one leaves the context for a preview).
"""

from __future__ import annotations

from collections.abc import Callable

from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg
from memory_service.harness.outcome import Turn
from memory_service.llm import ChatModel
from memory_service.tools.memory_tools import MemoryTools

OUT_OF_TOOL_CALLS = "(no answer: the tool-call budget of this turn was used up)"


def run_tool_loop(
    model: ChatModel,
    tools: MemoryTools,
    ctx: RuntimeContext,
    context: list[Msg],
    turn: Turn,
    *,
    limit: int,
    before_round: Callable[[], list[Msg]] | None = None,
    keep_result: Callable[[Msg], Msg] | None = None,
) -> None:
    """Add to ``turn`` what the model says after ``context``, tool rounds included."""
    schemas = tools.schemas()
    said = next((m for m in reversed(context) if m.role == "user"), None)  # this turn's input
    for iteration in range(1, limit + 1):
        if iteration > 1 and before_round is not None:
            context = before_round()
        last = iteration == limit
        reply = model.complete(
            [*context, *turn.messages],
            tools=schemas or None,
            tool_choice="none" if schemas and last else None,
        )
        turn.usage = turn.usage + reply.usage
        turn.iterations += 1
        if not reply.tool_calls:
            turn.messages.append(reply.message)
            return
        if last:  # the model ignored tool_choice=none: keep its words, drop the calls
            turn.messages.append(Msg.assistant(reply.text or OUT_OF_TOOL_CALLS))
            return
        turn.messages.append(reply.message)
        for call in reply.tool_calls:
            outcome = tools.run(ctx, call, said=said)
            turn.tools.append(outcome)
            result = Msg.tool(call.id, outcome.text, name=call.name)
            turn.messages.append(keep_result(result) if keep_result is not None else result)
