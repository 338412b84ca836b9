"""A small OpenAI-compatible chat completions server on loopback, with scripted replies.

The real openai SDK talks to it over real HTTP, so tests exercise the same client code, retries,
timeouts and error mapping as production. Tests script what the "model" answers:

    llm_server.push(text("hello"), error(500, "boom"), context_overflow(), malformed())
    llm_server.push(tool_calls(("get_weather", {"city": "Paris"})))
    llm_server.push(delayed(2.0, text("late")))            # for client timeouts
    llm_server.responder = lambda request: text("always")  # used when the queue is empty

and assert on what it was sent: ``llm_server.requests[-1].messages``. With an empty queue and no
responder the server answers 500 with ``x-should-retry: false``, so a missing script fails loudly.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer. ``body`` is JSON-encoded unless it is bytes (sent raw)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    release: threading.Event | None = None  # sent once set (``held``), or when the server closes


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None when the body was not JSON

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def model(self) -> str | None:
        return (self.body or {}).get("model")

    @property
    def prompt_text(self) -> str:
        """Every message's text joined: handy for ``assert "x" in request.prompt_text``."""
        parts = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(content or "")
        return "\n".join(parts)


Responder = Callable[[RecordedRequest], Reply]


# -- reply builders ------------------------------------------------------------------------


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def text(
    content: str,
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str = "stop",
) -> Reply:
    """A plain assistant answer."""
    message = {"role": "assistant", "content": content}
    return Reply(body=_completion(message, finish_reason, _usage(prompt_tokens, completion_tokens)))


def tool_calls(
    *calls: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str],
    content: str | None = None,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> Reply:
    """An assistant answer that calls tools: ``(name, arguments)`` or ``(name, args, id)``."""
    rendered = []
    for i, call in enumerate(calls):
        name, arguments = call[0], call[1]
        call_id = call[2] if len(call) > 2 else f"call_{i}_{name}"
        rendered.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        )
    message = {"role": "assistant", "content": content, "tool_calls": rendered}
    return Reply(body=_completion(message, "tool_calls", _usage(prompt_tokens, completion_tokens)))


def error(
    status: int,
    message: str = "scripted error",
    *,
    type: str = "server_error",  # noqa: A002 - OpenAI's field name
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type, "param": None, "code": code}}
    return Reply(status=status, body=body, headers=dict(headers or {}))


def rate_limited(retry_after_ms: int = 1) -> Reply:
    return error(
        429,
        "Rate limit reached for requests",
        type="requests",
        code="rate_limit_exceeded",
        headers={"retry-after-ms": str(retry_after_ms)},
    )


def server_error(retry_after_ms: int | None = 1) -> Reply:
    headers = {"retry-after-ms": str(retry_after_ms)} if retry_after_ms is not None else {}
    return error(500, "The server had an error while processing your request.", headers=headers)


def context_overflow(limit: int = 8192, used: int = 9000) -> Reply:
    """The 400 OpenAI answers when the prompt does not fit the model's window."""
    return error(
        400,
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {used} tokens. Please reduce the length of the messages.",
        type="invalid_request_error",
        code="context_length_exceeded",
    )


def malformed(raw: bytes = b'{"id": "chatcmpl-broken", "choices": [') -> Reply:
    """A 200 whose body is not valid JSON."""
    return Reply(body=raw, headers={"content-type": "application/json"})


def delayed(seconds: float, reply: Reply) -> Reply:
    """``reply``, sent after ``seconds`` (to trip client timeouts)."""
    return Reply(reply.status, reply.body, dict(reply.headers), delay_s=seconds)


def held(reply: Reply) -> tuple[Reply, threading.Event]:
    """``reply``, sent only once the returned event is set: the call waiting for it is in
    flight for exactly as long as the test needs, with no delay to guess."""
    release = threading.Event()
    return Reply(reply.status, reply.body, dict(reply.headers), release=release), release


_ids = itertools.count(1)


def _completion(message: dict[str, Any], finish_reason: str, usage: dict[str, int]) -> dict:
    return {
        "id": f"chatcmpl-test-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "",  # filled with the requested model when sent
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }


# -- the server ----------------------------------------------------------------------------


class LlmTestServer:
    """Serves ``POST {base}/chat/completions`` from a queue of scripted replies."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.responder: Responder | None = None
        self._queue: deque[Reply | Responder] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # lifecycle

    def start(self) -> LlmTestServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wake delayed handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LlmTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # scripting

    def push(self, *replies: Reply | Responder) -> None:
        """Queue replies, answered in order, one per request (a callable gets the request)."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            scripted = self._queue.popleft() if self._queue else self.responder
        if scripted is None:
            reply = error(500, "llm test server: no scripted reply left", type="test_server")
            reply.headers["x-should-retry"] = "false"
            return reply
        return scripted(request) if callable(scripted) else scripted

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/").endswith("/models"):
                    self._send(Reply(body={"object": "list", "data": [{"id": "test-model"}]}))
                else:
                    self._send(error(404, f"no route {self.path}", type="invalid_request_error"))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                request = RecordedRequest(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(error(404, f"no route {self.path}", type="invalid_request_error"))
                    return
                reply = server._next_reply(request)
                if reply.delay_s and server._closing.wait(reply.delay_s):
                    return
                if reply.release is not None:
                    while not reply.release.wait(0.02):
                        if server._closing.is_set():
                            return
                if isinstance(reply.body, dict) and "choices" in reply.body:
                    reply = Reply(
                        reply.status,
                        {**reply.body, "model": request.model or "test-model"},
                        reply.headers,
                    )
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                if isinstance(reply.body, bytes):
                    payload = reply.body
                else:
                    payload = json.dumps(reply.body).encode("utf-8")
                try:
                    self.send_response(reply.status)
                    headers = {"content-type": "application/json", **reply.headers}
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

        return Handler
