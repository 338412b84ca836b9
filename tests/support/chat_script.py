"""Scripts the loopback LLM server by what each request is for: flush, summary or chat.

A harness call sends several kinds of requests to one endpoint (the chat itself, the flush,
sometimes a compaction summary); ``Script`` tells them apart by their system prompt and answers
each from its own queue, recording the requests per kind so tests can assert on them.
"""

from __future__ import annotations

import threading
from collections import deque

from memory_service.pipeline.extraction import DEFAULT_FLUSH_PROMPT
from memory_service.shortterm.summary import DEFAULT_SUMMARY_PROMPT
from tests.support.llm_server import RecordedRequest, Reply, text

FLUSH_MARK = DEFAULT_FLUSH_PROMPT.splitlines()[0]
SUMMARY_MARK = DEFAULT_SUMMARY_PROMPT.splitlines()[0]

SUMMARY_REPLY = """<task_overview>Chat with the user.</task_overview>
<current_state>Talking.</current_state>
<important_discoveries>None.</important_discoveries>
<next_steps>Keep helping.</next_steps>
<context_to_preserve>Nothing.</context_to_preserve>"""


def kind_of(request: RecordedRequest) -> str:
    system = next((m.get("content") or "" for m in request.messages if m["role"] == "system"), "")
    if FLUSH_MARK in system:
        return "flush"
    if SUMMARY_MARK in system:
        return "summary"
    return "chat"


class Script:
    """``llm_server.responder = Script(...)``; queue replies with ``chat`` and ``flush``; an
    empty queue answers the kind's default (``defaults[kind]`` can be replaced)."""

    def __init__(
        self,
        *,
        chat: str = "OK.",
        flush: str = "NO_REPLY",
        summary: str = SUMMARY_REPLY,
    ) -> None:
        self.defaults = {"chat": text(chat), "flush": text(flush), "summary": text(summary)}
        self.queues: dict[str, deque[Reply]] = {k: deque() for k in self.defaults}
        self.requests: dict[str, list[RecordedRequest]] = {k: [] for k in self.defaults}
        self.order: list[str] = []
        self._asked = threading.Condition()

    def chat(self, *replies: Reply) -> Script:
        self.queues["chat"].extend(replies)
        return self

    def flush(self, *replies: Reply) -> Script:
        self.queues["flush"].extend(replies)
        return self

    def wait_for(self, kind: str, timeout_s: float = 10.0) -> RecordedRequest:
        """The first request of ``kind``, once it has arrived (the server thread notifies);
        AssertionError if none came within ``timeout_s``."""
        with self._asked:
            if not self._asked.wait_for(lambda: self.requests[kind], timeout_s):
                raise AssertionError(f"the model was never asked for a {kind}")
            return self.requests[kind][0]

    def __call__(self, request: RecordedRequest) -> Reply:
        kind = kind_of(request)
        with self._asked:
            self.requests[kind].append(request)
            self.order.append(kind)
            self._asked.notify_all()
        queue = self.queues[kind]
        return queue.popleft() if queue else self.defaults[kind]


# A compaction reply with all five blocks, about one trip: tests assert on its words.
TRIP_SUMMARY = """<task_overview>Plan a trip to Lisbon in May.</task_overview>
<current_state>Flights compared; hotel not booked yet.</current_state>
<important_discoveries>The user is allergic to peanuts. TAP is cheapest.</important_discoveries>
<next_steps>Book the hotel near Alfama.</next_steps>
<context_to_preserve>Budget 1200 EUR; dates 3-10 May.</context_to_preserve>"""
