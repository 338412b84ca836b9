"""``DELETE /v1/users/{user_id}``: erase a user from every store, with a receipt (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from memory_service.api.deps import AdminDep, ServicesDep, user_context
from memory_service.api.schemas.common import UserId
from memory_service.api.schemas.users import EraseReceiptOut
from memory_service.services.erasure_stores import build_erasure

router = APIRouter(prefix="/v1", tags=["users"])

UserPath = Annotated[UserId, Path(description="the user to erase")]


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
