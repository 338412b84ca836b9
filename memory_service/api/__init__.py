"""HTTP API (FastAPI): auth, schemas, errors, routes.

``create_app`` is imported on first use (PEP 562), so importing ``api.schemas`` (as the
Python client does) loads neither FastAPI nor the service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memory_service.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from memory_service.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
