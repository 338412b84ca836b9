"""``GET /v1/me``: the calling key's tenant, role, fingerprint and what the role may do."""

from __future__ import annotations

from memory_service.api.deps import PrincipalDep, role_actions
from memory_service.api.routes import resource_router
from memory_service.api.schemas.common import Merged
from memory_service.api.schemas.me import WhoAmI

router = resource_router("keys")


@router.get("/me", response_model=WhoAmI)
def who_am_i(principal: PrincipalDep):
    """Who this key is: its tenant, role and fingerprint (never the key), and what the role
    may do (``may``), so a client can leave out what the key would be refused. The routes
    still check every call."""
    return WhoAmI.model_validate(Merged(principal, may=role_actions(principal.role)))
