"""The memory pipeline's settings sections: compaction (and its importance weights), the flush
trigger, and the memory section (flush, consolidation, maintenance, recall injection).

Kept apart from ``settings.py``, which assembles every section into ``Settings`` and loads it.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from memory_service.config.section import Section as _Section
from memory_service.config.section import setting_error

log = logging.getLogger(__name__)


class ImportanceWeights(_Section):
    """How the ``importance`` compaction policy scores a message (the higher, the longer it is
    kept): S = ``relevance`` × R + ``recency`` × T + ``role`` × Ro. R: the cosine between the
    current turn's and the message's embeddings (0 to 1); without an embedder, the share of
    the turn's words the message holds; without a turn to compare with, 0.5. T = 1 / (1 +
    ``recency_decay_per_hour`` × hours since the message was created). Ro: the role's weight.
    The defaults are the architecture article's: relevance first, then recency, then who said
    it, the user's own words weighing most."""

    relevance: float = Field(0.5, ge=0)
    recency: float = Field(0.3, ge=0)
    role: float = Field(0.2, ge=0)
    recency_decay_per_hour: float = Field(0.1, ge=0, description="λ in T = 1 / (1 + λ·Δt)")
    user: float = Field(1.0, ge=0, le=1)
    assistant: float = Field(0.8, ge=0, le=1)
    tool: float = Field(0.6, ge=0, le=1)
    system: float = Field(0.9, ge=0, le=1)
    other: float = Field(0.5, ge=0, le=1, description="any other role")

    def role_weight(self, role: str) -> float:
        return {
            "user": self.user,
            "assistant": self.assistant,
            "tool": self.tool,
            "system": self.system,
        }.get(role, self.other)


class CompactionSettings(_Section):
    """When and how a session's messages are compacted (defaults from AgentScope's harness).

    Trigger at ``trigger_messages`` messages or when the token estimate passes
    ``trigger_ratio`` of the model window; keep the last ``keep_last`` messages verbatim and
    summarise the rest (``policy="summary"``), drop whole old user rounds
    (``policy="sliding_window"``, no LLM), or drop the lowest-scored messages
    (``policy="importance"``, no LLM: relevance to the current turn by the embedder, recency
    decay and role weight, weighted by ``importance_weights``; at most ``keep_last``
    conversation messages and ``trim_token_ratio`` of the window are kept). On a context
    overflow the tail shrinks to ``overflow_keep_last``. After a failed compaction (the model
    down, or a reply without the five blocks) the session waits ``retry_after_messages``
    more messages or ``retry_after_minutes``, whichever comes first, before the next flush
    and summary; the wait doubles with each failure in a row (up to 16 times).
    """

    policy: Literal["summary", "sliding_window", "importance"] = "summary"
    trigger_messages: int = Field(30, ge=2)
    trigger_ratio: float = Field(0.75, gt=0, le=1)
    keep_last: int = Field(10, ge=1)
    overflow_keep_last: int = Field(4, ge=0)
    window_rounds: int = Field(10, ge=1, description="user rounds kept by the sliding window")
    model: str | None = None  # None: MEMORY_LLM__MEMORY_MODEL, else MEMORY_LLM__MODEL
    context_window: int | None = Field(None, ge=1024)  # None: MEMORY_LLM__CONTEXT_WINDOW
    summary_prompt: str | None = Field(None, min_length=20)
    max_chars_per_message: int = Field(4_000, ge=200, description="transcript cap per message")
    retry_after_messages: int = Field(3, ge=1, description="messages to wait after a failure")
    retry_after_minutes: float = Field(5.0, gt=0, description="or minutes, whichever is first")
    importance_weights: ImportanceWeights = ImportanceWeights()
    trim_token_ratio: float = Field(
        0.5, gt=0, le=1, description="importance policy: tokens kept, as a share of the window"
    )
    flush_before_compaction: bool = Field(
        True,
        description="flush the messages about to be compacted away to long-term memory first "
        "(before a compaction and on a context overflow); False: compact without flushing",
    )

    @model_validator(mode="after")
    def _tail_shorter_than_trigger(self) -> CompactionSettings:
        if self.keep_last >= self.trigger_messages:
            raise setting_error(
                "keep_last",
                f"keep_last ({self.keep_last}) must be below trigger_messages "
                f"({self.trigger_messages}), or every message would trigger a compaction",
            )
        return self


class FlushTrigger(_Section):
    """When the post-call flush runs: after every call (``always``, the default), ``never``, or
    at most once per ``minutes`` (``throttled``). It governs the post-call path only: the
    flushes before compaction and on a context overflow always run.

    Build it with ``FlushTrigger.always()``, ``.never()`` or ``.throttled(15)``; in settings
    ``MEMORY_MEMORY__FLUSH_TRIGGER__MODE=throttled`` + ``..._MINUTES=15``, or in TOML
    ``flush_trigger = "throttled:15"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["always", "never", "throttled"] = "always"
    minutes: float | None = Field(None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        mode, _, minutes = value.strip().partition(":")
        return {"mode": mode.strip(), "minutes": minutes.strip() or None}

    @model_validator(mode="after")
    def _minutes_with_throttled(self) -> FlushTrigger:
        if self.mode == "throttled" and self.minutes is None:
            raise ValueError("a throttled flush trigger needs minutes > 0, e.g. throttled(15)")
        if self.mode != "throttled" and self.minutes is not None:
            raise ValueError(f"minutes only applies to a throttled trigger, not {self.mode!r}")
        return self

    @classmethod
    def always(cls) -> FlushTrigger:
        return cls(mode="always")

    @classmethod
    def never(cls) -> FlushTrigger:
        return cls(mode="never")

    @classmethod
    def throttled(cls, minutes: float) -> FlushTrigger:
        return cls(mode="throttled", minutes=minutes)

    def due(self, last_run: datetime | None, now: datetime) -> bool:
        """Whether the post-call flush runs now, given when it last ran (None: never)."""
        if self.mode == "never":
            return False
        if self.mode == "always" or last_run is None:
            return True
        return now - last_run >= timedelta(minutes=self.minutes or 0)


class MemorySettings(_Section):
    """The long-term memory pipeline: flush, prompt injection, memory tools, maintenance.

    ``model``: the model for flush and consolidation (None: the memory model, i.e.
    ``MEMORY_LLM__MEMORY_MODEL`` or else ``MEMORY_LLM__MODEL``). ``flush_prompt`` must tell the
    model to answer ``NO_REPLY`` when nothing is worth keeping (without it, an empty reply
    means that); ``consolidation_prompt`` must
    hold exactly two ``%d`` (max tokens, then max characters). ``disable_memory_hooks`` turns
    off the flush (every path, the idle flush too), the MEMORY.md/recall injection of the
    harness, the memory tools and every scheduled maintenance pass (so nothing but an explicit
    API or CLI call writes the ledgers or MEMORY.md); ``disable_memory_tools`` stops offering
    the memory tools alone. ``session_archive``: when the end of a session records its
    messages as events (``pipeline/session_archive.py``).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str | None = Field(None, min_length=1)
    flush_prompt: str | None = Field(None, min_length=20)
    flush_retries: int = Field(1, ge=0, le=5, description="extra tries of a failed flush")
    flush_trigger: FlushTrigger = FlushTrigger()
    consolidation_prompt: str | None = None
    consolidation_max_tokens: int = Field(4000, gt=0)
    consolidation_min_gap: timedelta = timedelta(minutes=30)
    daily_file_retention_days: int = Field(90, gt=0)
    session_retention_days: int = Field(180, gt=0)
    near_duplicate_distance: int = Field(3, ge=0, le=64, description="SimHash Hamming bits")
    maintenance_interval_hours: float = Field(6.0, gt=0)
    memory_load_token_budget: int = Field(
        4000, ge=0, description="MEMORY.md tokens put in the system prompt; beyond: a hint"
    )
    recall_by_relevance: int = Field(6, ge=0, le=100)
    recall_threshold: float = Field(
        0.45,
        ge=-1.0,  # the range of retrieve's threshold (``limits.MIN_THRESHOLD``..``MAX_``)
        le=1.0,
        description="the least dense (cosine) similarity to the message a memory must reach for "
        "recall by relevance to inject anything (retrieve's threshold)",
    )
    recall_by_importance: int = Field(
        5, ge=0, le=100, description="plus the relevance slots recall left unused"
    )
    recall_importance_floor: int = Field(
        5, ge=1, le=10, description="facts recalled by importance have at least this importance"
    )
    idle_flush_minutes: float = Field(
        30.0,
        ge=0,
        description="the scheduler flushes a session idle this long with unflushed messages "
        "(the background offline flush; with flush_trigger never it is the only one); 0: off",
    )
    sweep_interval_minutes: float = Field(
        5.0, gt=0, description="how often the scheduler runs the idle flush and the TTL purge"
    )
    session_archive: Literal["off", "no_model", "always"] = Field(
        "no_model",
        description="ending a session records its messages as events (kind event, the session "
        "and message numbers as provenance; tool results and instructions left out): off: "
        "never, the flush alone (no model: 503); no_model: when no memory model is configured, "
        "so the session reaches long-term memory without one; always: beside the flush too",
    )
    max_tool_iterations: int = Field(6, ge=1, le=50)
    memory_summary_length: int = Field(
        80, ge=10, le=2000, description="memory_search('*') shows each fact cut to this length"
    )
    instructions: str | None = Field(None, min_length=1, description="the agent's own prompt")
    disable_memory_hooks: bool = False
    disable_memory_tools: bool = False

    @field_validator("flush_trigger", mode="before")
    @classmethod
    def _trigger_not_none(cls, value: object) -> object:
        if value is None:
            raise ValueError(
                "flush_trigger must not be None: use FlushTrigger.never() to switch the "
                "post-call flush off"
            )
        return value

    @field_validator("flush_prompt")
    @classmethod
    def _flush_prompt_without_no_reply(cls, value: str | None) -> str | None:
        """Any prompt is accepted: one that never mentions ``NO_REPLY`` gets a warning, and an
        empty reply to it counts as nothing to record (``pipeline.extraction``)."""
        if value is not None and "NO_REPLY" not in value:
            log.warning(
                "MEMORY_MEMORY__FLUSH_PROMPT does not mention NO_REPLY: an empty reply will "
                "count as nothing to record"
            )
        return value

    @field_validator("consolidation_prompt")
    @classmethod
    def _two_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return validate_consolidation_prompt(value)

    @field_validator("consolidation_min_gap")
    @classmethod
    def _gap_not_negative(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError("consolidation_min_gap must not be negative")
        return value


def validate_consolidation_prompt(prompt: str) -> str:
    """A custom prompt must hold exactly two ``%d`` (max tokens, then max characters)."""
    placeholders = prompt.replace("%%", "")  # a literal percent sign is fine
    if placeholders.count("%d") != 2 or re.search(r"%(?!d)", placeholders):
        raise ValueError(
            "consolidation_prompt must contain exactly two '%d' (max tokens, then max "
            "characters) and no other % placeholders (write %% for a literal %)"
        )
    return prompt
