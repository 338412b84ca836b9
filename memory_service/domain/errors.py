"""Errors that carry a machine-readable code; the API maps them to HTTP statuses."""

from __future__ import annotations

import logging


class MemoryServiceError(Exception):
    """Base class: ``code`` is stable and machine-readable, the message is for people.
    ``log_level``: how loud an answer of this error with a 5xx status is logged (ERROR: an
    operator should look; lower for a state the deployment chose, such as no model)."""

    code = "memory_error"
    http_status = 500
    log_level = logging.ERROR

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidInputError(MemoryServiceError, ValueError):
    code = "invalid_input"
    http_status = 422


class InvalidIdError(InvalidInputError):
    code = "invalid_id"


class NotFoundError(MemoryServiceError, LookupError):
    code = "not_found"
    http_status = 404


class ForbiddenError(MemoryServiceError):
    """The key may not do this: ``forbidden`` for its role, ``forbidden_user`` for a personal
    key asked about anyone but its own user (or about the whole tenant)."""

    code = "forbidden"
    http_status = 403


class ConflictError(MemoryServiceError):
    """A write based on a stale version: the caller must reload and retry."""

    code = "conflict"
    http_status = 409


class InactiveFactError(MemoryServiceError):
    """A confirmation of a fact that is no longer open (superseded or closed): confirming it
    would not bring it back, so the caller records what is true instead."""

    code = "not_active"
    http_status = 409


class UserErasedError(MemoryServiceError):
    """A write for a user who is being erased, or was erased after the write's work began:
    refused, so nothing of an erased user comes back. Not a ``ConflictError``: reloading and
    trying again must not bring the data back either."""

    code = "user_erased"
    http_status = 409


class BackendUnavailableError(MemoryServiceError):
    code = "backend_unavailable"
    http_status = 503


class FlushFailedError(MemoryServiceError):
    """A flush that failed after its retries; its messages are in a dead-letter file (the
    session they came from is left as it was)."""

    code = "flush_failed"
    http_status = 502


class ConfigurationError(MemoryServiceError):
    code = "invalid_setting"
