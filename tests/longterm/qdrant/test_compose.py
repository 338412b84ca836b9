"""docker-compose.yml cannot run here (no Docker engine): check its shape instead. It parses,
the three services are there with health checks and volumes, the service waits for healthy
dependencies, and every MEMORY_* variable is a real setting that loads into a valid Settings
selecting Qdrant by URL and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from memory_service.config import Settings, load_settings

REPO = Path(__file__).resolve().parents[3]
SERVICE = "memory-service"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with nothing set: the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _field_exists(name: str) -> bool:
    """MEMORY_A__B -> Settings.a.b, walking nested pydantic models."""
    model: type[BaseModel] = Settings
    parts = name.removeprefix("MEMORY_").lower().split("__")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        if i < len(parts) - 1:
            nested = field.annotation
            if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
                return False
            model = nested
    return True


def test_services_health_checks_and_volumes(compose):
    services = compose["services"]
    assert {"qdrant", "postgres", SERVICE} <= set(services)
    for name in ("qdrant", "postgres", SERVICE):
        assert services[name].get("healthcheck", {}).get("test"), name
    assert services["qdrant"]["image"].startswith("qdrant/qdrant:")
    assert services["postgres"]["image"].startswith("postgres:")
    app = services[SERVICE]
    assert app["build"]["context"] == "."
    assert (REPO / app["build"].get("dockerfile", "Dockerfile")).is_file()
    assert app["depends_on"] == {
        "qdrant": {"condition": "service_healthy"},
        "postgres": {"condition": "service_healthy"},
    }
    declared = set(compose.get("volumes") or {})
    for name in ("qdrant", "postgres", SERVICE):
        for mount in services[name]["volumes"]:
            assert mount.split(":", 1)[0] in declared, (name, mount)


def test_every_memory_variable_is_a_setting(compose):
    env = _environment(compose["services"][SERVICE])
    names = [n for n in env if n.startswith("MEMORY_")]
    assert names
    unknown = [n for n in names if not _field_exists(n)]
    assert unknown == []
    assert not _field_exists("MEMORY_QDRANT__NO_SUCH_FIELD")  # the walk can say no


def test_compose_environment_loads_qdrant_and_postgres_settings(compose, monkeypatch):
    env = _environment(compose["services"][SERVICE])
    for name, value in env.items():
        monkeypatch.setenv(name, _interpolate(value))
    settings = load_settings()
    assert settings.longterm.backend == "qdrant"
    assert settings.qdrant.url == "http://qdrant:6333" and settings.qdrant.path is None
    assert settings.shortterm.backend == "postgres"
    assert settings.postgres.dsn and "@postgres:5432/" in settings.postgres.dsn
    assert settings.state_in_postgres  # replicas keep nothing on their disks
    assert settings.api.host == "0.0.0.0" and str(settings.api.port) in str(
        compose["services"][SERVICE]["ports"]
    )
    postgres_env = _environment(compose["services"]["postgres"])
    user, db = postgres_env["POSTGRES_USER"], postgres_env["POSTGRES_DB"]
    assert settings.postgres.dsn.startswith(f"postgresql://{user}:")
    assert settings.postgres.dsn.endswith(f"/{db}")
