"""The tenant's users: who they are, with their fact counts (``GET /v1/users``), a user's
consolidated MEMORY.md, and ``DELETE /v1/users/{user_id}``: erase a user from every store,
with a receipt (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from memory_service.api.deps import AdminDep, PrincipalDep, ServicesDep, user_context
from memory_service.api.routes import resource_router
from memory_service.api.schemas.common import AgentId, UserId
from memory_service.api.schemas.users import (
    AgentOut,
    EraseReceiptOut,
    MemoryDocOut,
    UserList,
    UserOut,
)
from memory_service.domain.context import RuntimeContext, Scope
from memory_service.services.container import Services
from memory_service.services.erasure_stores import build_erasure
from memory_service.stores.memory_docs import MEMORY_MD
from memory_service.stores.memory_docs.files import documents
from memory_service.stores.user_data import UserData

router = resource_router("users")

UserPath = Annotated[UserId, Path(description="the user to erase")]
OwnerPath = Annotated[UserId, Path(description="the user whose memory this is")]
AgentQuery = Annotated[AgentId | None, Query(description="the agent the call is made for")]


def _facts_of(services: Services, ctx: RuntimeContext) -> int:
    memory = services.longterm
    return memory.count_user(ctx) if isinstance(memory, UserData) else 0


@router.get("/users", response_model=UserList)
def list_users(principal: PrincipalDep, services: ServicesDep):
    """The key's tenant's users: those with facts, sessions or other data kept, each with
    the number of facts stored; then the agents with shared memory and the tenant's own
    shared facts. Another tenant's users are never listed, and a personal key's list holds
    its own user alone (beside the shared scopes it reads)."""
    users: list[UserOut] = []
    agents: list[AgentOut] = []
    tenant_facts = 0
    for ctx in services.tenant_owners(principal.tenant_id):
        if ctx.scope == "user" and principal.user_id not in (None, ctx.user_id):
            continue
        facts = _facts_of(services, ctx)
        if ctx.scope == "agent" and ctx.agent_id is not None:
            agents.append(AgentOut(agent_id=ctx.agent_id, facts=facts))
        elif ctx.scope == "tenant":
            tenant_facts = facts
        else:
            users.append(UserOut(user_id=ctx.user_id, facts=facts))
    return UserList(users=users, agents=agents, tenant_facts=tenant_facts)


@router.get("/users/{user_id}/memory-md", response_model=MemoryDocOut)
def read_memory_md(
    principal: PrincipalDep,
    services: ServicesDep,
    user_id: OwnerPath,
    agent_id: AgentQuery = None,
    scope: Annotated[
        Scope, Query(description="whose MEMORY.md: the user's (default), the agent's or tenant's")
    ] = "user",
):
    """The consolidated MEMORY.md of the user (or of the agent's or tenant's shared memory,
    with ``scope``), as maintenance last wrote it, and the names of its snapshots; an owner
    never consolidated has ``text: ""``."""
    ctx = user_context(principal, user_id, agent_id=agent_id).in_scope(scope)
    docs = documents(services.memory_docs, services.settings.workspace)
    return MemoryDocOut(name=MEMORY_MD, text=docs.read(ctx), snapshots=docs.snapshots(ctx))


@router.delete(
    "/users/{user_id}",
    response_model=EraseReceiptOut,
    responses={404: {"description": "nothing of this user is stored: nothing was done"}},
)
def erase_user(principal: AdminDep, services: ServicesDep, user_id: UserPath):
    """Everything the service keeps of the user, gone: facts in every backend, MEMORY.md
    and its snapshots, vector caches, session states, summaries and logs, evicted tool
    results, dead letters and the maintenance marker. A request or flush of the user still
    running cannot write anything back (409 ``user_erased`` for it). Needs an admin key;
    erases only in that key's tenant. ``DELETE /v1/users/{user_id}/memories`` removes facts
    only."""
    ctx = user_context(principal, user_id)
    erasure = build_erasure(services)
    try:
        receipt = erasure.erase(ctx, by=f"key:{principal.key_id}")
    finally:
        erasure.close()
    return EraseReceiptOut.model_validate(receipt)
