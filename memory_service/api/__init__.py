"""HTTP API (FastAPI): auth, schemas, errors, routes."""

from memory_service.api.app import create_app

__all__ = ["create_app"]
