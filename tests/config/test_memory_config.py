"""MemorySettings and FlushTrigger: the issue's defaults, validation at construction with clear
errors, and the same settings through the environment and a TOML file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memory_service.config import FlushTrigger, MemorySettings, load_settings
from memory_service.domain.errors import ConfigurationError

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def test_defaults_are_the_issues():
    config = MemorySettings()
    assert config.model is None and config.flush_prompt is None
    assert config.consolidation_prompt is None
    assert config.consolidation_max_tokens == 4000
    assert config.consolidation_min_gap == timedelta(minutes=30)
    assert config.consolidation_min_gap == timedelta(minutes=30)
    assert config.daily_file_retention_days == 90
    assert config.session_retention_days == 180
    assert config.near_duplicate_distance == 3
    assert config.maintenance_interval_hours == 6
    assert config.flush_trigger == FlushTrigger.always()
    assert (config.recall_by_relevance, config.recall_by_importance) == (6, 5)
    assert config.memory_load_token_budget == 4000
    assert not config.disable_memory_hooks and not config.disable_memory_tools


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"consolidation_prompt": "Stay within %d tokens."}, "exactly two '%d'"),
        ({"consolidation_prompt": "%d %d %d tokens"}, "exactly two '%d'"),
        ({"consolidation_prompt": "Within %d tokens (%d chars), 100%s sure"}, "exactly two"),
        ({"consolidation_max_tokens": 0}, "greater than 0"),
        ({"consolidation_max_tokens": -5}, "greater than 0"),
        ({"consolidation_min_gap": timedelta(minutes=-1)}, "must not be negative"),
        ({"consolidation_min_gap": -60}, "must not be negative"),
        ({"daily_file_retention_days": 0}, "greater than 0"),
        ({"session_retention_days": -1}, "greater than 0"),
        ({"near_duplicate_distance": 65}, "less than or equal to 64"),
        ({"maintenance_interval_hours": 0}, "greater than 0"),
        ({"flush_trigger": None}, "must not be None: use FlushTrigger.never()"),
        ({"flush_prompt": "short"}, "at least 20 characters"),
        ({"flush_retries": -1}, "greater than or equal to 0"),
        ({"memory_load_token_budget": -1}, "greater than or equal to 0"),
        ({"recall_by_relevance": -1}, "greater than or equal to 0"),
        ({"recall_by_importance": 101}, "less than or equal to 100"),
        ({"max_tool_iterations": 0}, "greater than or equal to 1"),
        ({"model": ""}, "at least 1 character"),
        ({"recall_counts": 3}, "Extra inputs are not permitted"),
    ],
)
def test_bad_values_fail_at_construction_naming_the_field(fields, message):
    with pytest.raises(ValidationError) as caught:
        MemorySettings(**fields)
    text = str(caught.value)
    assert message in text
    assert next(iter(fields)) in text


def test_valid_custom_prompts_are_kept():
    prompt = "Rewrite MEMORY.md within %d tokens (about %d characters)."
    flush = "Extract durable facts as bullets, or answer NO_REPLY."
    config = MemorySettings(consolidation_prompt=prompt, flush_prompt=flush)
    assert (config.consolidation_prompt, config.flush_prompt) == (prompt, flush)


def test_a_flush_prompt_without_no_reply_is_kept_with_a_warning(caplog):
    flush = "Extract the facts of this conversation as bullets."
    with caplog.at_level("WARNING"):
        assert MemorySettings(flush_prompt=flush).flush_prompt == flush
    assert "empty reply will count as nothing to record" in caplog.text


def test_changes_after_construction_are_validated_too():
    config = MemorySettings()
    with pytest.raises(ValidationError, match="must not be None"):
        config.flush_trigger = None
    with pytest.raises(ValidationError, match="exactly two"):
        config.consolidation_prompt = "%d only"
    config.flush_trigger = FlushTrigger.never()
    assert config.flush_trigger.mode == "never"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: FlushTrigger.throttled(0), "greater than 0"),
        (lambda: FlushTrigger.throttled(-5), "greater than 0"),
        (lambda: FlushTrigger(mode="throttled"), "needs minutes > 0"),
        (lambda: FlushTrigger(mode="always", minutes=5), "only applies to a throttled"),
        (lambda: FlushTrigger(mode="sometimes"), "'always', 'never' or 'throttled'"),
        (lambda: FlushTrigger.model_validate("throttled"), "needs minutes > 0"),
        (lambda: FlushTrigger.model_validate("throttled:soon"), "valid number"),
    ],
)
def test_flush_trigger_validation(build, message):
    with pytest.raises(ValidationError, match=message):
        build()


def test_flush_trigger_decisions():
    assert FlushTrigger.always().due(NOW, NOW)
    assert not FlushTrigger.never().due(None, NOW)
    throttled = FlushTrigger.throttled(15)
    assert throttled.due(None, NOW)
    assert not throttled.due(NOW - timedelta(minutes=14), NOW)
    assert throttled.due(NOW - timedelta(minutes=15), NOW)
    assert FlushTrigger.model_validate("throttled:15") == throttled
    assert FlushTrigger.model_validate(" never ") == FlushTrigger.never()
    with pytest.raises(ValidationError):
        throttled.minutes = 1  # frozen: a trigger is a value


def test_memory_settings_from_the_environment(monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    monkeypatch.setenv("MEMORY_MEMORY__FLUSH_TRIGGER__MODE", "throttled")
    monkeypatch.setenv("MEMORY_MEMORY__FLUSH_TRIGGER__MINUTES", "20")
    monkeypatch.setenv("MEMORY_MEMORY__CONSOLIDATION_MIN_GAP", "PT45M")
    monkeypatch.setenv("MEMORY_MEMORY__DISABLE_MEMORY_TOOLS", "true")
    memory = load_settings().memory
    assert memory.flush_trigger == FlushTrigger.throttled(20)
    assert memory.consolidation_min_gap == timedelta(minutes=45)
    assert memory.disable_memory_tools


def test_bad_memory_settings_name_the_variable(monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    monkeypatch.setenv("MEMORY_MEMORY__CONSOLIDATION_MAX_TOKENS", "0")
    with pytest.raises(ConfigurationError, match="MEMORY_MEMORY__CONSOLIDATION_MAX_TOKENS"):
        load_settings()
    monkeypatch.delenv("MEMORY_MEMORY__CONSOLIDATION_MAX_TOKENS")
    monkeypatch.setenv("MEMORY_MEMORY__CONSOLIDATION_PROMPT", "only %d")
    with pytest.raises(ConfigurationError, match="MEMORY_MEMORY__CONSOLIDATION_PROMPT.*two '%d'"):
        load_settings()


def test_memory_settings_from_a_toml_file(tmp_path, monkeypatch):
    path = tmp_path / "memory.toml"
    path.write_text(
        '[memory]\nflush_trigger = "throttled:15"\nrecall_by_relevance = 3\n'
        'consolidation_prompt = "Keep it within %d tokens, about %d characters."\n'
    )
    monkeypatch.setenv("MEMORY_CONFIG", str(path))
    memory = load_settings().memory
    assert memory.flush_trigger == FlushTrigger.throttled(15)
    assert memory.recall_by_relevance == 3
    assert memory.consolidation_prompt.count("%d") == 2
    path.write_text('[memory]\nflush_trigger = "throttled:0"\n')
    with pytest.raises(ConfigurationError, match="MEMORY_MEMORY__FLUSH_TRIGGER"):
        load_settings()
