"""Log lines: one JSON object per line (for collectors), or plain text on a terminal.

Every line carries the ``trace_id`` and ``span_id`` of the work in progress (see
``tracing.py``), so an operator can follow one request through the flush, compaction and
maintenance it caused. What is logged is the callers' business: at INFO the service logs ids,
counts, statuses and times, never an API key, a fact's text or a message's content.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

from memory_service.observe.tracing import current_ids

LogFormat = Literal["auto", "json", "text"]

# LogRecord attributes that are not "extra" fields a caller passed.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class TraceFilter(logging.Filter):
    """Stamps each record with the current trace ids (unless the caller passed its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "trace_id", None) is None:
            record.trace_id, record.span_id = current_ids()
        return True


_LOGGED = "_memory_service_logged"


def mark_logged(exc: BaseException) -> None:
    """Note that ``exc``'s traceback has been logged (under its request's trace)."""
    with contextlib.suppress(AttributeError, TypeError):  # a type that takes no attributes
        setattr(exc, _LOGGED, True)


def already_logged(exc: BaseException | None) -> bool:
    return bool(getattr(exc, _LOGGED, False))


class LoggedOnce(logging.Filter):
    """Drops a record whose exception was already logged: the server (uvicorn's "Exception in
    ASGI application") would otherwise log a traceback the service logged once already, with
    its trace id, when it answered the 500."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and already_logged(record.exc_info[1]))


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", "trace_id", "span_id", ...extra}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", None),
            "span_id": getattr(record, "span_id", None),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The terminal form: time, level, logger, message, then the trace id when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace_id = getattr(record, "trace_id", None)
        return f"{text} [trace {trace_id}]" if trace_id else text


def resolve_format(fmt: LogFormat, stream: object) -> Literal["json", "text"]:
    """``auto``: text when the stream is a terminal, JSON otherwise."""
    if fmt != "auto":
        return fmt
    isatty = getattr(stream, "isatty", None)
    return "text" if callable(isatty) and isatty() else "json"


def configure_logging(fmt: LogFormat = "auto", level: str | int = "INFO", stream=None) -> None:
    """One root handler in ``fmt`` at ``level``, replacing the one an earlier call added. Like
    ``logging.basicConfig``, it leaves alone a root logger someone else configured (a test
    runner capturing logs, an embedding application)."""
    stream = stream if stream is not None else sys.stderr
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_memory_service", False)]
    if len(ours) < len(root.handlers):
        return
    handler = logging.StreamHandler(stream)
    handler.addFilter(TraceFilter())
    handler.addFilter(LoggedOnce())
    chosen = resolve_format(fmt, stream)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    for old in ours:
        root.removeHandler(old)
    handler._memory_service = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
