"""FastAPI dependencies: services from app state, the caller from the bearer key.

A personal key (bound to one user) is held to that user here and nowhere else: ``get_principal``
refuses a ``user_id`` of another user in the path or the query string before any route runs,
and ``user_context``, through which every route makes the ``RuntimeContext`` it reads and
writes with, refuses one in the body (``Principal.user_for``); routes that reach every user of
the tenant depend on ``require_every_user``. Each refusal is a 403 ``forbidden_user`` before
anything is read or written.

The dependencies are coroutines: FastAPI runs a plain function in the thread pool, a hop per
dependency per request (a few tenths of a millisecond each), and these only read app state.
The one that may block, the key ring's look at its file or store, is sent to the pool.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from memory_service.api.errors import ApiError
from memory_service.api.keys import ApiKeyRing, Principal
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ForbiddenError
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.tracing import current_ids
from memory_service.services.container import Services
from memory_service.stores.api_keys import RIGHTS, ROLE_ALIASES, ROLES
from memory_service.usecases.base import Memories
from memory_service.usecases.rights import Writer

_bearer = HTTPBearer(auto_error=False, description="API key as a bearer token")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key header")


async def get_services(request: Request) -> Services:
    return request.app.state.services


async def get_principal(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header_key: Annotated[str | None, Security(_header)],
) -> Principal:
    """The tenant behind the API key; 401 when the key is missing or unknown."""
    ring: ApiKeyRing = request.app.state.key_ring
    key = bearer.credentials if bearer else header_key
    if not key:
        raise ApiError(401, "unauthorized", "missing API key: send 'Authorization: Bearer <key>'")
    principal = ring.known(key)
    if principal is None:  # the ring looks at its file or store first: blocking, off the loop
        principal = await run_in_threadpool(ring.lookup, key)
    if principal is None:
        raise ApiError(401, "unauthorized", "unknown API key")
    if principal.user_id is not None:  # a personal key: no other user in the path or query
        principal.user_for(request.path_params.get("user_id"))
        for named in request.query_params.getlist("user_id"):
            principal.user_for(named)
    return principal


# What an admin key may do beyond the rest; what every key may do to its users' own memory;
# what a key that reaches every user of its tenant may do besides (not a personal key).
ADMIN_ACTIONS: tuple[str, ...] = ("erase_users", "import", "run_maintenance")
MEMBER_ACTIONS: tuple[str, ...] = ("read", "write_memory")
EVERY_USER_ACTIONS: tuple[str, ...] = ("list_users",)


def role_actions(role: str) -> list[str]:
    """What a key of ``role`` may do, from the rights the routes' checks ask
    (``stores.api_keys.RIGHTS``: ``require_admin``, ``require_every_user``,
    ``usecases.rights.check_writable``), for a page that shows only those controls (``GET /v1/me``).
    A role this service does not know may do nothing."""
    role = ROLE_ALIASES.get(role, role)
    if role not in ROLES:
        return []
    rights = RIGHTS[role]
    actions = list(MEMBER_ACTIONS)
    if "every_user" in rights:
        actions.extend(EVERY_USER_ACTIONS)
    if "shared_write" in rights:
        actions.append("write_shared_memory")
    if "admin" in rights:
        actions.extend(ADMIN_ACTIONS)
    return actions


async def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.may("admin"):
        bound = principal.user_id is not None
        raise ForbiddenError(
            "this operation needs an admin key"
            + (f" (this key is bound to user {principal.user_id!r})" if bound else ""),
            code="forbidden_user" if bound else "forbidden",
        )
    return principal


async def require_every_user(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The key, if it reaches every user of its tenant (not a personal key's)."""
    principal.check_every_user("this route")
    return principal


async def get_longterm(services: Annotated[Services, Depends(get_services)]) -> LongTermMemory:
    return services.longterm


def user_context(
    principal: Principal,
    user_id: str,
    session_id: str | None = None,
    *,
    agent_id: str | None = None,
) -> RuntimeContext:
    """The context of a request: tenant from the key, never from the body; a personal key's
    own user, any other ``user_id`` a 403 ``forbidden_user``; the request's trace and span, so
    the work it hands on (flush, compaction) logs under them."""
    trace_id, span_id = current_ids()
    return RuntimeContext(
        principal.tenant_id,
        principal.user_for(user_id) or user_id,
        session_id,
        agent_id=agent_id,
        trace_id=trace_id,
        span_id=span_id,
    )


def writer_of(principal: Principal) -> Writer:
    """The key's holder as a writer of memory: whether it may write the shared memory is the
    use cases' rule (``usecases.rights``)."""
    return Writer.of_role(principal.role)


async def get_memories(services: Annotated[Services, Depends(get_services)]) -> Memories:
    return services.memories


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(require_admin)]
EveryUserDep = Annotated[Principal, Depends(require_every_user)]
LongTermDep = Annotated[LongTermMemory, Depends(get_longterm)]
ServicesDep = Annotated[Services, Depends(get_services)]
MemoriesDep = Annotated[Memories, Depends(get_memories)]
