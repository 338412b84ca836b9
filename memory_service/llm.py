"""ChatModel: a small, synchronous client for any OpenAI-compatible chat completions endpoint.

Built on the openai SDK (timeouts, retries with back-off, ``retry-after`` honoured). What this
module adds is the mapping of provider failures onto the service's errors, so callers can react
to *what* went wrong rather than to an SDK's class tree:

- ``ContextOverflowError``: the prompt does not fit the model's window (compaction retries);
- ``LlmTimeoutError`` / ``LlmUnavailableError``: the endpoint is slow, down or rate limiting;
- ``LlmBadResponseError``: the endpoint answered something that is not a chat completion;
- ``LlmNotConfiguredError``: no model is configured; features that need one say so.

Every reply carries its token usage, so callers can account for it per tenant.
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from memory_service.config.settings import LlmSettings
from memory_service.domain.errors import MemoryServiceError
from memory_service.domain.messages import Msg, ToolCall, content_text

if TYPE_CHECKING:  # the SDK costs ~0.6 s to import: only a process that calls a model pays
    import openai

log = logging.getLogger(__name__)


# -- errors --------------------------------------------------------------------------------


class LlmError(MemoryServiceError):
    """The model endpoint failed; the message says how."""

    code = "llm_error"
    http_status = 502


class LlmUnavailableError(LlmError):
    code = "llm_unavailable"
    http_status = 503


class LlmNotConfiguredError(LlmUnavailableError):
    """No model is configured: a 503 the deployment chose, not a fault (logged at WARNING)."""

    code = "llm_not_configured"
    log_level = logging.WARNING


class LlmTimeoutError(LlmUnavailableError):
    code = "llm_timeout"
    http_status = 504


class LlmBadResponseError(LlmError):
    code = "llm_bad_response"


class ContextOverflowError(LlmError):
    """The prompt is longer than the model's context window."""

    code = "context_overflow"
    http_status = 413


NOT_CONFIGURED_MESSAGE = (
    "no LLM is configured: set MEMORY_LLM__MODEL (and MEMORY_LLM__BASE_URL for a "
    "non-OpenAI endpoint) to enable this feature"
)


def require_model(model: ChatModel | None, feature: str = "this feature") -> ChatModel:
    """``model``, or a clear ``LlmNotConfiguredError`` naming the feature that needs it."""
    if model is None:
        raise LlmNotConfiguredError(f"{feature} needs an LLM; {NOT_CONFIGURED_MESSAGE}")
    return model


_OVERFLOW_CODES = {"context_length_exceeded", "string_above_max_length"}
_OVERFLOW_TEXT = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|"
    r"input is too long|reduce the length of the messages",
    re.IGNORECASE,
)


def is_context_overflow(exc: openai.APIStatusError) -> bool:
    """Providers say it differently; OpenAI uses code ``context_length_exceeded``."""
    if exc.status_code not in (400, 413, 422):
        return False
    if exc.code in _OVERFLOW_CODES:
        return True
    return bool(_OVERFLOW_TEXT.search(str(exc.message or "")))


# -- replies -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class ChatReply:
    """The assistant's message, what it cost, and which model answered."""

    message: Msg
    usage: Usage
    model: str
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return self.message.content

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.message.tool_calls


# -- the model -----------------------------------------------------------------------------


@cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process (the system's CAs; ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
    honoured): loading the CA store is most of what an SDK client costs to make, 20.7 ms a
    client against 0.26 ms with the context shared (2 cores, 2026-12-04), and a process makes a
    ``ChatModel`` for every set of services it builds (workers, every test's app)."""
    return ssl.create_default_context()


class ChatModel:
    """One model on one endpoint. Thread-safe; share one instance per process."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 1,
        context_window: int = 128_000,
        client: openai.OpenAI | None = None,
    ) -> None:
        if not model:
            raise LlmNotConfiguredError(NOT_CONFIGURED_MESSAGE)
        self.model = model
        self.context_window = context_window
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._owns_client = client is None
        if client is None:
            import openai
        self._client = client or openai.OpenAI(
            base_url=base_url,
            # local OpenAI-compatible servers often need no key; the SDK insists on one
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "no-key",
            timeout=timeout_s,
            max_retries=max_retries,
            http_client=openai.DefaultHttpxClient(timeout=timeout_s, verify=_tls_context()),
        )

    @classmethod
    def from_settings(cls, llm: LlmSettings, *, memory: bool = False) -> ChatModel | None:
        """The configured model (``memory=True``: ``memory_model`` if set), or None."""
        name = (llm.memory_model or llm.model) if memory else llm.model
        if not name:
            return None
        return cls(
            model=name,
            base_url=llm.base_url,
            api_key=llm.api_key.get_secret_value() if llm.api_key else None,
            timeout_s=llm.timeout_s,
            max_retries=llm.max_retries,
            context_window=llm.context_window,
        )

    def with_model(self, model: str | None) -> ChatModel:
        """The same endpoint and connection pool, another model name (None: this one)."""
        if not model or model == self.model:
            return self
        return ChatModel(
            model=model,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            context_window=self.context_window,
            client=self._client,
        )

    def complete(
        self,
        messages: Sequence[Msg | Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        response_format: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> ChatReply:
        """One chat completion. Raises the ``LlmError`` family, never an SDK exception."""
        payload = [m.to_openai() if isinstance(m, Msg) else dict(m) for m in messages]
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = list(tools)
        if tool_choice is not None:
            extra["tool_choice"] = tool_choice
        if temperature is not None:
            extra["temperature"] = temperature
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        if response_format is not None:
            extra["response_format"] = dict(response_format)
        if timeout_s is not None:
            extra["timeout"] = timeout_s
        # the SDK retries transport failures; a garbled 200 gets the same budget here
        for attempt in range(self.max_retries + 1):
            try:
                return self._complete_once(payload, extra)
            except LlmBadResponseError:
                if attempt >= self.max_retries:
                    raise
                log.warning("model %r sent a malformed reply; retrying", self.model)
        raise AssertionError("unreachable")

    def _complete_once(self, payload: list[dict[str, Any]], extra: dict[str, Any]) -> ChatReply:
        import openai  # loaded by __init__ already (or by the caller's own client)

        try:
            completion = self._client.chat.completions.create(
                model=self.model, messages=payload, **extra
            )
        except openai.APITimeoutError as exc:
            raise LlmTimeoutError(f"model {self.model!r} did not answer in time") from exc
        except openai.APIConnectionError as exc:
            raise LlmUnavailableError(f"cannot reach the model endpoint: {exc}") from exc
        except openai.APIStatusError as exc:
            raise _status_error(self.model, exc) from exc
        except openai.APIResponseValidationError as exc:
            raise LlmBadResponseError(f"model {self.model!r}: invalid reply: {exc}") from exc
        except (json.JSONDecodeError, ValueError, TypeError) as exc:
            raise LlmBadResponseError(f"model {self.model!r}: reply is not JSON: {exc}") from exc
        return _reply(self.model, completion)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def _status_error(model: str, exc: openai.APIStatusError) -> LlmError:
    said = exc.body.get("message") if isinstance(exc.body, Mapping) else None
    detail = f"model {model!r}: HTTP {exc.status_code}: {said or exc.message}"
    if is_context_overflow(exc):
        return ContextOverflowError(detail)
    if exc.status_code == 429:
        return LlmUnavailableError(detail, code="llm_rate_limited")
    if exc.status_code >= 500 or exc.status_code == 408:
        return LlmUnavailableError(detail)
    return LlmError(detail)


def _no_nul(text: str | None) -> str | None:
    """A model's text without NUL: no message may hold one (facts and sessions refuse it),
    and a stray NUL in a reply is noise, not a reason to fail the call."""
    return text.replace("\x00", "") if text else text


def _reply(model: str, completion: Any) -> ChatReply:
    choices = getattr(completion, "choices", None)
    if not choices:
        raise LlmBadResponseError(f"model {model!r}: reply has no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise LlmBadResponseError(f"model {model!r}: reply has no message")
    try:
        calls = tuple(
            ToolCall(call.id, call.function.name, _no_nul(call.function.arguments) or "{}")
            for call in (message.tool_calls or ())
        )
        msg = Msg("assistant", _no_nul(content_text(message.content)), tool_calls=calls)
    except (AttributeError, MemoryServiceError) as exc:
        raise LlmBadResponseError(f"model {model!r}: malformed message: {exc}") from exc
    usage = getattr(completion, "usage", None)
    return ChatReply(
        message=msg,
        usage=Usage(
            getattr(usage, "prompt_tokens", 0) or 0,
            getattr(usage, "completion_tokens", 0) or 0,
            getattr(usage, "total_tokens", 0) or 0,
        ),
        model=getattr(completion, "model", None) or model,
        finish_reason=getattr(choice, "finish_reason", None),
    )
