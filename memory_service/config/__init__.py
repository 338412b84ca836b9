"""Settings: the leaf every other part reads its configuration from.

``settings`` holds the sections (``MEMORY_*`` environment variables, nested with ``__``, and
an optional TOML file); ``retrieval`` the declarative retrieval strategy and its presets. This
package imports nothing of the service but ``errors``, so anything may import it.
"""

from memory_service.config.retrieval import (
    FUSIONS,
    LEGS,
    MODES,
    PRESETS,
    Fusion,
    Leg,
    Mode,
    RetrievalConfig,
    legs_for_mode,
    preset,
)
from memory_service.config.settings import (
    ApiSettings,
    CompactionSettings,
    EmbeddingSettings,
    FlushTrigger,
    ImportanceWeights,
    LlmSettings,
    LongTermSettings,
    MemorySettings,
    PostgresSettings,
    QdrantSettings,
    Settings,
    ShortTermSettings,
    load_settings,
    setting_name,
    validate_consolidation_prompt,
)

__all__ = [
    "FUSIONS",
    "LEGS",
    "MODES",
    "PRESETS",
    "ApiSettings",
    "CompactionSettings",
    "EmbeddingSettings",
    "FlushTrigger",
    "ImportanceWeights",
    "Fusion",
    "Leg",
    "LlmSettings",
    "LongTermSettings",
    "MemorySettings",
    "Mode",
    "PostgresSettings",
    "QdrantSettings",
    "RetrievalConfig",
    "Settings",
    "ShortTermSettings",
    "legs_for_mode",
    "load_settings",
    "preset",
    "setting_name",
    "validate_consolidation_prompt",
]
