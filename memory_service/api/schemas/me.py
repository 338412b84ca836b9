"""Body of ``GET /v1/me``: who the key is, so a client (the inspector) offers only what the
key may do."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from memory_service.api.schemas.common import Out


class WhoAmI(Out):  # an api.keys.Principal, with its role's actions
    """The key's tenant and role, its fingerprint, and what its role may do."""

    tenant_id: str
    role: str
    user_id: Annotated[
        str | None,
        Field(description="a personal key's one user (every call acts for it); null otherwise"),
    ] = None
    key_id: Annotated[
        str, Field(description="the key's fingerprint (first hex digits of its SHA-256)")
    ]
    may: Annotated[
        list[str],
        Field(
            description="what the role may do: read, write_memory (the users' own facts), "
            "list_users (every user of the tenant), write_shared_memory (agent and tenant "
            "scopes), erase_users, import, "
            "run_maintenance; a role not listed here may do none of it"
        ),
    ]
