"""Which characters a text field may hold: one rule for every field, at every entry point.

**NUL is refused in every text field**: a fact's text, key and tags, its source's origin and
text, a message's content, name, metadata, ``tool_call_id`` and tool calls, a filter's key and
tags, a query. PostgreSQL's text and jsonb cannot hold it, and no client means one. **Every
other character is kept as sent**: line breaks, tabs, carriage returns, escape sequences and
Unicode separators are what was said, and the Markdown ledgers escape whatever would break a
line (``longterm/files/fact_files.py``), so a hostile key or tag round-trips.

Ids (tenant, user, session, agent) have their own stricter pattern (``context.validate_id``).
The error's code is the one of the thing the field belongs to (``invalid_fact``,
``invalid_source``, ``invalid_filter``, ``invalid_query``), so the same mistake gets the same
code in a body, a query string, an import line, a tool call or the CLI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from memory_service.domain.errors import InvalidInputError

# Unicode's "Cc" category is closed (C0, DEL, C1): what producers flatten (``clip_source_text``)
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")

NUL_PROBLEM = "must not contain NUL"


def has_nul(value: object) -> bool:
    """Whether ``value`` (text, or JSON-like data: keys, values, items) holds a NUL."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def check_text(value: object, what: str, code: str) -> None:
    """``InvalidInputError`` (``code``) naming ``what`` when ``value`` (text, or JSON-like
    data) breaks the rule."""
    if has_nul(value):
        raise InvalidInputError(f"{what} {NUL_PROBLEM}", code=code)
