"""Settings: environment (``MEMORY_*``, nested with ``__``), an optional TOML file, defaults.

Precedence: explicit arguments > environment > ``MEMORY_CONFIG`` TOML file > defaults. A bad
value fails at start with a ``ConfigurationError`` that names the setting as an environment
variable, e.g. ``MEMORY_LONGTERM__BACKEND``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from indexing.embeddings import BUNDLED_MODEL
from memory_service.errors import ConfigurationError
from memory_service.longterm.retrieval import PRESETS


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LongTermSettings(_Section):
    backend: Literal["files", "qdrant"] = "files"
    retrieval_preset: str = "hybrid"

    @field_validator("retrieval_preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; known: {', '.join(PRESETS)}")
        return value


class EmbeddingSettings(_Section):
    model: str = Field(
        BUNDLED_MODEL,
        description="'bundled:all-MiniLM-L6-v2' or a local sentence-transformers directory",
    )
    device: str = "cpu"
    batch_size: int = Field(64, ge=1, le=4096)
    threads: int | None = Field(None, ge=1, le=256, description="torch intra-op threads")
    cache_entries: int = Field(200_000, ge=0)


class ApiSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)


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
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML
        raise ConfigurationError(f"MEMORY_CONFIG {config_file!r}: {exc}") from exc
