"""FastAPI dependencies: services from app state, the caller from the bearer key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from memory_service.api.errors import ApiError
from memory_service.api.keys import ApiKeyRing, Principal
from memory_service.context import RuntimeContext
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.tracing import current_ids
from memory_service.replicas.api_keys import ROLES, SHARED_MEMORY_ROLES
from memory_service.services.container import Services

_bearer = HTTPBearer(auto_error=False, description="API key as a bearer token")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key header")


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_principal(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header_key: Annotated[str | None, Security(_header)],
) -> Principal:
    """The tenant behind the API key; 401 when the key is missing or unknown."""
    ring: ApiKeyRing = request.app.state.key_ring
    key = bearer.credentials if bearer else header_key
    if not key:
        raise ApiError(401, "unauthorized", "missing API key: send 'Authorization: Bearer <key>'")
    principal = ring.lookup(key)
    if principal is None:
        raise ApiError(401, "unauthorized", "unknown API key")
    return principal


ADMIN_ROLE = "admin"
# What only an admin key may do; what any key may do to its tenant's users' own memory.
ADMIN_ACTIONS: tuple[str, ...] = ("erase_users", "import", "run_maintenance")
MEMBER_ACTIONS: tuple[str, ...] = ("read", "write_memory")


def role_actions(role: str) -> list[str]:
    """What a key of ``role`` may do, from the rules the routes' checks apply
    (``require_admin``, ``require_scope_writer``), for a page that shows only those
    controls (``GET /v1/me``). A role this service does not know may do nothing."""
    if role not in ROLES:
        return []
    actions = list(MEMBER_ACTIONS)
    if role in SHARED_MEMORY_ROLES:
        actions.append("write_shared_memory")
    if role == ADMIN_ROLE:
        actions.extend(ADMIN_ACTIONS)
    return actions


def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.role != ADMIN_ROLE:
        raise ApiError(403, "forbidden", "this operation needs an admin key")
    return principal


def get_longterm(services: Annotated[Services, Depends(get_services)]) -> LongTermMemory:
    return services.longterm


def user_context(
    principal: Principal,
    user_id: str,
    session_id: str | None = None,
    *,
    agent_id: str | None = None,
) -> RuntimeContext:
    """The context of a request: tenant from the key, never from the body; the request's
    trace and span, so the work it hands on (flush, compaction) logs under them."""
    trace_id, span_id = current_ids()
    return RuntimeContext(
        principal.tenant_id,
        user_id,
        session_id,
        agent_id=agent_id,
        trace_id=trace_id,
        span_id=span_id,
    )


def require_scope_writer(principal: Principal, scopes: Iterable[str | None]) -> None:
    """403 unless the key may write every scope named: a user's own memory takes any key;
    the shared agent and tenant memory a ``curator`` or ``admin`` key."""
    shared = sorted({s for s in scopes if s not in (None, "user")})
    if shared and principal.role not in SHARED_MEMORY_ROLES:
        raise ApiError(
            403,
            "forbidden",
            f"writing {' and '.join(shared)} memory needs a curator or admin key "
            f"(this key's role: {principal.role})",
        )


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(require_admin)]
LongTermDep = Annotated[LongTermMemory, Depends(get_longterm)]
ServicesDep = Annotated[Services, Depends(get_services)]
