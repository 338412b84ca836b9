"""W3C trace context: the trace and span of the work in progress, in a ``ContextVar``.

A request's ``traceparent`` header names the caller's trace; this service keeps the trace id
and opens a span of its own. A malformed header is ignored and a new trace starts. The ids are
carried in ``RuntimeContext`` too, so work handed on with a context (flush, compaction,
maintenance) logs under the same trace.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


@dataclass(frozen=True, slots=True)
class Trace:
    """The trace and this service's span; ``parent_id``: the caller's span, if it sent one."""

    trace_id: str
    span_id: str
    parent_id: str | None = None
    flags: str = "01"

    def traceparent(self) -> str:
        """The header value that names this span, for the response and for callees."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def new_span_id() -> str:
    return secrets.token_hex(8)


def new_trace() -> Trace:
    return Trace(secrets.token_hex(16), new_span_id())


def parse_traceparent(header: str | None) -> Trace | None:
    """The caller's trace with a new span of ours, or None for a missing or malformed header
    (wrong shape, version ``ff``, upper-case hex, an all-zero trace or span id)."""
    if not header:
        return None
    match = _TRACEPARENT.fullmatch(header.strip())
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or parent_id == _ZERO_SPAN:
        return None
    return Trace(trace_id, new_span_id(), parent_id, flags)


def trace_from_header(header: str | None) -> Trace:
    """The trace of an incoming request: the header's, else a new one."""
    return parse_traceparent(header) or new_trace()


_current: ContextVar[Trace | None] = ContextVar("memory_trace", default=None)


def current_trace() -> Trace | None:
    return _current.get()


def current_ids() -> tuple[str | None, str | None]:
    """``(trace_id, span_id)`` of the work in progress, ``(None, None)`` outside any."""
    trace = _current.get()
    return (trace.trace_id, trace.span_id) if trace is not None else (None, None)


@contextlib.contextmanager
def using_trace(trace: Trace | None) -> Iterator[Trace | None]:
    """Make ``trace`` current inside the block (None: leave the current one)."""
    if trace is None:
        yield _current.get()
        return
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)


def using_ids(trace_id: str | None, span_id: str | None) -> contextlib.AbstractContextManager:
    """Make the ids a context carries current (e.g. a flush handed a ``RuntimeContext``);
    no ids: the current trace stays."""
    if not trace_id:
        return using_trace(None)
    return using_trace(Trace(trace_id, span_id or new_span_id()))
