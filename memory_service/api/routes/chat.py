"""``POST /v1/chat``: one agent call with long-term and short-term memory in place."""

from __future__ import annotations

from memory_service.api.deps import PrincipalDep, ServicesDep, user_context
from memory_service.api.routes import resource_router
from memory_service.api.schemas.chat import ChatRequest, ChatResponse
from memory_service.services.work import build_harness

router = resource_router("chat")


@router.post("/chat", response_model=ChatResponse)
def chat(body: ChatRequest, principal: PrincipalDep, services: ServicesDep):
    """The assistant's reply, and what memory did for it: the facts recalled into the prompt
    (and why), MEMORY.md's share of it, the facts flushed out of the conversation, whether
    the session was compacted, tool calls, and tokens by purpose. Without a configured model
    it answers 503 ``llm_not_configured``; the rest of the API keeps working."""
    ctx = user_context(principal, body.user_id, body.session_id, agent_id=body.agent_id)
    outcome = build_harness(services).call(ctx, body.message)
    return ChatResponse.model_validate(outcome)
