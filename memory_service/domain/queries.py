"""What a search query may be, for recall and for session search alike: text with something
in it (``invalid_query``), no NUL (``characters``, ``invalid_query``), at most
``MAX_QUERY_BYTES`` of UTF-8 (``query_too_large``).

One function, so a query over the limit is ``query_too_large`` wherever it is sent: the use
cases (``memory_service.usecases``) run it for the API, the CLI, MCP and the memory tools, and
``LongTermMemory.retrieve`` runs it for a library caller who calls the memory directly.
"""

from __future__ import annotations

from memory_service.domain.characters import check_text
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.limits import MAX_QUERY_BYTES


def check_query(query: object, max_bytes: int = MAX_QUERY_BYTES) -> str:
    """``query`` itself, or ``InvalidInputError`` with the code of what is wrong with it."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must not be empty", code="invalid_query")
    check_text(query, "query", "invalid_query")
    if len(query.encode("utf-8")) > max_bytes:
        raise InvalidInputError(f"query is over {max_bytes} bytes of UTF-8", code="query_too_large")
    return query


def query_from(text: str, max_bytes: int = MAX_QUERY_BYTES) -> str:
    """``text`` cut to what a query may hold (whole characters, at most ``max_bytes`` of
    UTF-8), for the service's own recalls of a text it did not choose the length of: a chat
    message, a fact being recorded (a fact may be longer than a query)."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore").strip()
