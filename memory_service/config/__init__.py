"""Settings: the leaf every other part reads its configuration from.

``settings`` assembles the sections (``MEMORY_*`` environment variables, nested with ``__``,
and an optional TOML file; the memory pipeline's sections are in ``memory_settings``);
``retrieval`` the declarative retrieval strategy and its presets. This
package imports nothing of the service but ``errors``, so anything may import it.
"""

from memory_service.config.memory_settings import (
    CompactionSettings,
    FlushTrigger,
    ImportanceWeights,
    MemorySettings,
    validate_consolidation_prompt,
)
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
    EmbeddingSettings,
    LlmSettings,
    LongTermSettings,
    PostgresSettings,
    PrivacySettings,
    QdrantSettings,
    Settings,
    ShortTermSettings,
    load_settings,
    setting_name,
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
    "PrivacySettings",
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
