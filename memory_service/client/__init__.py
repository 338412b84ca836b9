"""The Python client of the memory-service HTTP API.

    from memory_service.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8080", api_key="msk_...") as memory:
        memory.record("alice", ["Alice is allergic to peanuts"])
        hits = memory.search("alice", "what can Alice not eat?").hits

Results are the API's own response models (``memory_service.api.schemas``) and requests are
checked with its request models before they are sent. It imports httpx and pydantic, never
FastAPI, torch or the embedding runtime.
"""

from memory_service.client.async_client import AsyncMemoryClient
from memory_service.client.errors import (
    ApiConnectionError,
    ApiError,
    AuthenticationError,
    BadRequestError,
    ClientError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ServerError,
    ServiceUnavailableError,
    UnsupportedMediaTypeError,
)
from memory_service.client.sync_client import MemoryClient
from memory_service.client.transport import RetryPolicy

__all__ = [
    "ApiConnectionError",
    "ApiError",
    "AsyncMemoryClient",
    "AuthenticationError",
    "BadRequestError",
    "ClientError",
    "ConflictError",
    "InvalidRequestError",
    "MemoryClient",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailableError",
    "UnsupportedMediaTypeError",
]
