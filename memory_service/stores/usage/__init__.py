"""Token usage and pipeline counters per tenant.

Every LLM call the service makes on a tenant's behalf (chat, flush, compaction) adds its tokens
under a purpose, and the memory pipeline counts its outcomes (facts flushed, failures, dead
letters); ``GET /v1/usage`` reports them. ``UsageStore`` is what every user of the counters
types against: ``FilesUsageStore`` (``files.py``) or ``PostgresUsageStore`` (``postgres.py``,
``MEMORY_STATE__BACKEND=postgres``, so replicas' usage sums); ``ReplicaStores`` builds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from memory_service.domain.errors import BackendUnavailableError
from memory_service.llm import Usage

_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "total_tokens")


# what a failed ``record`` may raise; callers log it, a usage problem never fails their work
RECORD_ERRORS = (OSError, TimeoutError, BackendUnavailableError)


class UsageStore(Protocol):
    """Where tenant usage is added and read (``FilesUsageStore`` or ``PostgresUsageStore``)."""

    def record(
        self,
        tenant_id: str,
        *,
        tokens: Mapping[str, Usage] | None = None,
        counters: Mapping[str, int] | None = None,
    ) -> None: ...

    def report(self, tenant_id: str) -> dict[str, Any]: ...
