"""The use cases: what a request asks of the memories, and every rule an entry point must
keep on the way, in one place.

Each use case takes one request value (a frozen dataclass, checked when it is made, so a bad
request fails before any model loads or store is read) and the ``Memories`` it acts on. The
API's routes, the CLI's commands, the MCP tools and the model-facing memory tools build the
request from what their caller sent and show what comes back; they hold no rule of their own.
Who may write the shared memory (``rights``), which sessions a source may name, what a filter
and a query may be: each is checked here once, with one error code.

- ``memories``: record, search, list, get, update, confirm, delete, forget (long-term facts);
- ``sessions``: search, list, get, end (short-term memory);
- ``transfer``: export.
"""
