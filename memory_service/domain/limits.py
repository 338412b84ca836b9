"""Every input limit of the service, in one place (a leaf: it imports nothing).

The API's schemas, the CLI, the memory tools, the harness and the backends' own checks read
these, so one mistake gets one limit and one error wherever it is made.
"""

from __future__ import annotations

# -- ids and keys ---------------------------------------------------------------------------
MAX_ID_CHARS = 128  # a tenant, user or session id (see context.ID_PATTERN)
MIN_API_KEY_CHARS = 16  # an API key in the keys file

# -- facts ----------------------------------------------------------------------------------
MAX_FACT_TEXT_BYTES = 8 * 1024  # a fact's text, UTF-8
MAX_KEY_CHARS = 256
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_SOURCE_CHARS = 256  # a fact source's origin label ("flush", "memory_save", a caller's)
MAX_SOURCE_TEXT_BYTES = 2 * 1024  # the message text a fact came from, UTF-8 (producers cut it)
MAX_PHRASINGS = 8  # near-duplicates one fact takes in; the next is a fact of its own
MAX_SOURCE_MESSAGES = 256  # message sequence numbers one fact's source may name
MIN_IMPORTANCE = 1
MAX_IMPORTANCE = 10
MIN_CONFIDENCE = 0.0
MAX_CONFIDENCE = 1.0
MAX_FACTS_PER_RECORD = 1_000  # one POST /v1/memories, one record() call from the API
MAX_PAGE_SIZE = 1_000  # list(): the largest page
MAX_CURSOR_CHARS = 512  # a list() cursor sent back
MAX_FACT_ID_CHARS = 64  # a fact id in a path (ids are UUIDs: 36)
# how far ahead of this server's clock a fact's given created_at / updated_at may be: another
# machine's clock, not a fact from the future (which no as_of answer would ever hold)
MAX_CLOCK_SKEW_S = 5 * 60

# -- recall ---------------------------------------------------------------------------------
MAX_QUERY_BYTES = 4 * 1024  # a recall or session-search query, UTF-8 (chat input is cut to it)
MAX_TOP_K = 100
MIN_THRESHOLD = -1.0  # a recall score threshold
MAX_THRESHOLD = 1.0

# -- sessions and chat ----------------------------------------------------------------------
MAX_MESSAGES_PER_APPEND = 500
MAX_SESSION_MESSAGE_BYTES = 1024 * 1024  # one appended message
MAX_CHAT_MESSAGE_BYTES = 64 * 1024  # the user's message of one chat call
MAX_TOOL_CALLS = 128  # tool calls in one assistant message
MAX_SESSION_HITS = 100  # session_search over the API: the most hits asked for
MAX_NAME_CHARS = 256  # a tool call's id, a function's or a message author's name
MAX_KEEP_LAST = 1_000  # messages a forced compaction may be asked to keep verbatim
MAX_TOOL_RESULT_REF_CHARS = 512  # the reference of an evicted tool result

# -- memory tools (what the model may ask for) -----------------------------------------------
MAX_TOOL_PATH_CHARS = 512
MAX_TOOL_SEARCH_LINES = 50
MAX_TOOL_GET_LINES = 400
MAX_TOOL_GET_CHARS = 20_000
MAX_TOOL_RECALL_FACTS = 50  # memory_recall: facts shown for one key or prefix
MAX_TOOL_PRUNE_FACTS = 200  # memory_prune: facts pruned (or listed) in one call
