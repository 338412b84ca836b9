"""Settings: environment (``MEMORY_*``, nested with ``__``), an optional TOML file, defaults.

Precedence: explicit arguments > environment > ``MEMORY_CONFIG`` TOML file > defaults. A bad
value fails at start with a ``ConfigurationError`` that names the setting as an environment
variable, e.g. ``MEMORY_LONGTERM__BACKEND``.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from indexing.embeddings import BUNDLED_MODEL
from memory_service.config.retrieval import PRESETS, RetrievalConfig
from memory_service.errors import ConfigurationError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LongTermSettings(_Section):
    """Which backend keeps facts, and how recall ranks them.

    ``retrieval_preset`` names a built-in preset (``memory_service.config.retrieval``) or one
    defined under ``presets`` (in TOML: ``[longterm.presets.mine]`` with ``fusion = "rrf"``
    and so on; a custom preset may not reuse a built-in name).

    ``expire_by_importance``: a fact without its own ``expires_at`` expires by importance
    (below 5: 7 days; 5-9: 30 days; 10: never), hidden from every read at once and deleted by
    maintenance; False: only ``expires_at`` expires a fact. ``confidence_half_life_days``: each
    hit's confidence is its stored confidence halved every this many days of age (None: not
    decayed), never below ``confidence_floor``. ``track_access``: each recall counts its hits
    (``access_count``, ``last_accessed_at``), in memory, written per user every
    ``access_flush_seconds`` (0: after every recall) and on close."""

    backend: Literal["files", "qdrant"] = "files"
    retrieval_preset: str = "hybrid"
    presets: dict[str, RetrievalConfig] = Field(default_factory=dict)
    expire_by_importance: bool = True
    confidence_half_life_days: float | None = Field(None, gt=0)
    confidence_floor: float = Field(0.0, ge=0.0, le=1.0)
    track_access: bool = True
    access_flush_seconds: float = Field(30.0, ge=0.0)

    @model_validator(mode="after")
    def _known_preset(self) -> LongTermSettings:
        clash = sorted(set(self.presets) & set(PRESETS))
        if clash:
            raise ValueError(f"custom presets may not reuse a built-in name: {', '.join(clash)}")
        for name, custom in list(self.presets.items()):
            if custom.name != name:  # the table's name is the preset's name
                self.presets[name] = custom.with_changes(name=name)
        known = {**PRESETS, **self.presets}
        if self.retrieval_preset not in known:
            raise ValueError(
                f"unknown retrieval preset {self.retrieval_preset!r}; known: {', '.join(known)}"
            )
        return self

    def retrieval(self) -> RetrievalConfig:
        """The strategy ``retrieval_preset`` names."""
        return {**PRESETS, **self.presets}[self.retrieval_preset]


class EmbeddingSettings(_Section):
    """The embedding model and what runs it.

    ``backend="onnx"`` runs the model on onnxruntime (exported once, cached under
    ``onnx_cache_dir``): the same vectors as ``"torch"`` (sentence-transformers, the reference)
    without importing torch while serving. ``quantize`` serves an int8 copy (onnx only): faster,
    but its vectors move enough to change rankings."""

    model: str = Field(
        BUNDLED_MODEL,
        description="'bundled:all-MiniLM-L6-v2' or a local sentence-transformers directory",
    )
    backend: Literal["onnx", "torch"] = "onnx"
    device: str = "cpu"
    batch_size: int = Field(64, ge=1, le=4096)
    threads: int | None = Field(
        None,
        ge=1,
        le=256,
        description="intra-op threads of the backend (default: min(4, cores))",
    )
    quantize: bool = Field(False, description="onnx: serve the int8 dynamically quantised model")
    onnx_cache_dir: Path | None = Field(
        None, description="exported ONNX models (default: ~/.cache/memory-service/onnx)"
    )
    cache_entries: int = Field(
        10_000,
        ge=0,
        description="texts whose vectors stay in memory (LRU; 10,000 x 384 dims is ~15 MB): "
        "repeated queries and re-recorded facts; stored facts' vectors live in the backend",
    )


class ApiSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    max_import_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="the body limit of POST /v1/import alone (an export file, read whole to "
        "check every line before writing): about 100,000 facts; import bigger exports per user",
    )


class QdrantSettings(_Section):
    """Qdrant Edge in-process at ``path`` (default ``<workspace>/qdrant``), or a server at
    ``url`` through qdrant-client (``url=":memory:"`` is qdrant-client's local mode)."""

    path: Path | None = None
    url: str | None = None
    api_key: SecretStr | None = None
    collection: str = Field("memories", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    timeout_s: float = Field(10.0, gt=0)


class ShortTermSettings(_Section):
    backend: Literal["files", "postgres"] = "files"
    ttl_hours: float | None = Field(
        None, gt=0, description="a session state unused this long expires; None: never"
    )
    postgres_table: str = Field("agent_state", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    tool_result_max_chars: int = Field(
        20_000, ge=256, description="longer tool results are evicted to a file"
    )
    tool_result_preview_chars: int = Field(2_000, ge=0)


class PostgresSettings(_Section):
    dsn: str | None = None
    pool_min: int = Field(1, ge=0)
    pool_max: int = Field(10, ge=1)


class LlmSettings(_Section):
    """Any OpenAI-compatible endpoint. No ``model``: features that need an LLM say so."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None
    memory_model: str | None = None  # a smaller model for flush/compaction; None: ``model``
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(1, ge=0, le=10)
    context_window: int = Field(128_000, ge=1024)


class ImportanceWeights(_Section):
    """How the ``importance`` compaction policy scores a message (the higher, the longer it is
    kept): ``relevance`` × cosine similarity to the current turn (the embedder; 0 to 1) +
    ``recency`` × 0.5^(messages after it / ``half_life_messages``) + ``role`` × the role's
    weight (``user``, ``assistant``, ``tool``). Defaults after the architecture article:
    relevance first, then recency, then who said it; the user's own words weigh most."""

    relevance: float = Field(0.5, ge=0)
    recency: float = Field(0.3, ge=0)
    role: float = Field(0.2, ge=0)
    half_life_messages: float = Field(10.0, gt=0)
    user: float = Field(1.0, ge=0, le=1)
    assistant: float = Field(0.6, ge=0, le=1)
    tool: float = Field(0.4, ge=0, le=1)


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
            raise ValueError(
                f"keep_last ({self.keep_last}) must be below trigger_messages "
                f"({self.trigger_messages}), or every message would trigger a compaction"
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
    model to answer ``NO_REPLY`` when nothing is worth keeping; ``consolidation_prompt`` must
    hold exactly two ``%d`` (max tokens, then max characters). ``disable_memory_hooks`` turns
    off the flush (every path, the idle flush too), the MEMORY.md/recall injection of the
    harness and the scheduled consolidation; ``disable_memory_tools`` stops offering the
    memory tools.
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
    max_tool_iterations: int = Field(6, ge=1, le=50)
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
    def _flush_prompt_says_no_reply(cls, value: str | None) -> str | None:
        if value is not None and "NO_REPLY" not in value:
            raise ValueError(
                "flush_prompt must tell the model to answer NO_REPLY when nothing is worth keeping"
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


class ObservabilitySettings(_Section):
    """``/metrics`` and the log lines (README: Observability)."""

    metrics: bool = Field(True, description="serve Prometheus metrics at /metrics")
    metrics_require_key: bool = Field(
        False, description="/metrics answers only with an API key (any role); default: open"
    )
    log_format: Literal["auto", "json", "text"] = Field(
        "auto", description="json: one JSON object per line; text; auto: text on a terminal"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    access_log: bool = Field(True, description="one line per request (route, status, time)")


class Settings(BaseSettings):
    """Every setting of the service. ``MEMORY_CONFIG=path.toml`` adds a file layer."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORY_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    workspace: Path = Path("data")
    api_keys_file: Path | None = None
    longterm: LongTermSettings = LongTermSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    api: ApiSettings = ApiSettings()
    qdrant: QdrantSettings = QdrantSettings()
    shortterm: ShortTermSettings = ShortTermSettings()
    postgres: PostgresSettings = PostgresSettings()
    llm: LlmSettings = LlmSettings()
    compaction: CompactionSettings = CompactionSettings()
    memory: MemorySettings = MemorySettings()
    observability: ObservabilitySettings = ObservabilitySettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("MEMORY_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)


def validate_consolidation_prompt(prompt: str) -> str:
    """A custom prompt must hold exactly two ``%d`` (max tokens, then max characters)."""
    placeholders = prompt.replace("%%", "")  # a literal percent sign is fine
    if placeholders.count("%d") != 2 or re.search(r"%(?!d)", placeholders):
        raise ValueError(
            "consolidation_prompt must contain exactly two '%d' (max tokens, then max "
            "characters) and no other % placeholders (write %% for a literal %)"
        )
    return prompt


def setting_name(loc: tuple[object, ...]) -> str:
    """('longterm', 'backend') -> 'MEMORY_LONGTERM__BACKEND'."""
    parts = [str(p) for p in loc if not isinstance(p, int)]
    return "MEMORY_" + "__".join(p.upper() for p in parts)


def load_settings(**overrides: object) -> Settings:
    """Settings from all sources, or ``ConfigurationError`` naming each bad setting."""
    config_file = os.environ.get("MEMORY_CONFIG")
    if config_file and not Path(config_file).is_file():
        raise ConfigurationError(f"MEMORY_CONFIG: no such file {config_file!r}")
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(f"{setting_name(err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigurationError(f"invalid setting: {problems}") from exc
    except (OSError, ValueError) as exc:  # unreadable TOML, or an undecodable variable
        where = f" (MEMORY_CONFIG {config_file!r} or the environment)" if config_file else ""
        raise ConfigurationError(f"invalid setting{where}: {exc}") from exc
