"""Body of ``GET /v1/usage``: the tenant's LLM tokens by purpose and pipeline counters, as
``memory_service.stores.usage.files.FilesUsageStore.report`` reads them."""

from __future__ import annotations

from memory_service.api.schemas.common import Out, TokenUsage


class UsageRow(TokenUsage):
    calls: int


class UsageReport(Out):
    """The tenant's LLM tokens by purpose (chat, flush, compaction) and pipeline counters."""

    tenant_id: str
    tokens: dict[str, UsageRow]
    total: UsageRow
    counters: dict[str, int]
    updated_at: str | None
