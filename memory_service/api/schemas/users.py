"""Body of ``DELETE /v1/users/{user_id}``: the receipt of an erase
(``pipeline.erasure.EraseReceipt``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from memory_service.api.schemas.common import Out


class EraseReceiptOut(Out):  # a pipeline.erasure.EraseReceipt
    """What was removed of the user, per store, when the erase finished and by which key."""

    tenant_id: str
    user_id: str
    erased_at: datetime
    by: Annotated[str, Field(description="'key:<fingerprint>' of the admin key, or 'cli'")]
    removed: Annotated[
        dict[str, int],
        Field(
            description="items removed per store: facts.<backend>, memory_md (MEMORY.md and "
            "its snapshots; memory_md.postgres: in PostgreSQL), vector_caches, "
            "sessions.<store>, session_logs, tool_results (with PostgreSQL state: there, and "
            "session_logs.files / tool_results.files: the workspace's), dead_letters, "
            "maintenance (the last-run marker; both with PostgreSQL state: there, and "
            "dead_letters.files / maintenance.files: the workspace's)"
        ),
    ]
    total: int
    left_behind: Annotated[
        int, Field(description="files in the user's folder that no store claims (kept, logged)")
    ]


class UserOut(Out):
    user_id: str
    facts: Annotated[int, Field(description="facts stored (superseded and expired included)")]


class AgentOut(Out):
    agent_id: str
    facts: Annotated[int, Field(description="facts in the agent's shared memory")]


class UserList(Out):
    """The tenant's users (a user with sessions only has 0 facts), the agents with shared
    memory, and the count of the tenant's own shared facts."""

    users: list[UserOut]
    agents: list[AgentOut]
    tenant_facts: int


class MemoryDocOut(Out):
    """A scope owner's consolidated MEMORY.md ('' when there is none) and its snapshots'
    names, oldest first."""

    name: str
    text: str
    snapshots: list[str]
