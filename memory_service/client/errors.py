"""The client's exceptions: an API error keeps the service's ``code``, ``message`` and HTTP
``status``, as a subclass per status so callers can catch what they handle."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Anything the client raises on purpose."""


class ApiConnectionError(ClientError):
    """The service could not be reached (after the retries the call allows)."""


class ApiError(ClientError):
    """The service answered an error: ``{"error": {"code", "message", ...}}``."""

    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.body = body  # the whole error object (e.g. ``bad_lines`` of an import)


class BadRequestError(ApiError):  # 400
    pass


class AuthenticationError(ApiError):  # 401
    pass


class PermissionDeniedError(ApiError):  # 403
    pass


class NotFoundError(ApiError):  # 404
    pass


class ConflictError(ApiError):  # 409
    pass


class PayloadTooLargeError(ApiError):  # 413
    pass


class UnsupportedMediaTypeError(ApiError):  # 415
    pass


class InvalidRequestError(ApiError):  # 422: a field, an id (code invalid_id), bad lines
    pass


class ServiceUnavailableError(ApiError):  # 503: e.g. llm_not_configured, backend down
    pass


class ServerError(ApiError):  # any other 5xx
    pass


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    422: InvalidRequestError,
    503: ServiceUnavailableError,
}


def error_for(status: int, payload: Any) -> ApiError:
    """The exception for an error response's status and decoded body (any shape)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        error = {"code": "http_error", "message": str(payload)[:500] or f"HTTP {status}"}
    code = str(error.get("code", "http_error"))
    message = str(error.get("message", ""))
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, code, message, error)
