"""docker-compose.yml's ``postgres`` profile (no Docker engine here: its shape is checked): the
official pgvector image, the service waiting for it healthy, every MEMORY_* variable a real
setting that selects PostgreSQL for facts, sessions and replica state, and a ``serve
--workers`` command the CLI accepts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from memory_service.cli import build_parser
from memory_service.commands.workers import parse_workers
from memory_service.config import load_settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))["services"]


def _defaults(value: str) -> str:
    """Compose's ``${VAR:-default}`` with nothing set: the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_the_postgres_profile_runs_the_service_on_the_pgvector_image(services):
    database, app = services["pgvector"], services["memory-service-pg"]
    assert database["profiles"] == app["profiles"] == ["postgres"]
    assert database["image"].startswith("pgvector/pgvector:pg")
    assert database["healthcheck"]["test"]
    assert app["depends_on"] == {"pgvector": {"condition": "service_healthy"}}
    assert app["build"]["context"] == "."
    # the default profile's services stay out of it
    assert "profiles" not in services["memory-service"]


def test_its_settings_put_everything_in_postgresql_with_two_workers(services, monkeypatch):
    app = services["memory-service-pg"]
    for name in [n for n in os.environ if n.startswith("MEMORY_")]:
        monkeypatch.delenv(name)
    for name, value in app["environment"].items():
        monkeypatch.setenv(name, _defaults(str(value)))
    settings = load_settings()
    assert settings.longterm.backend == "postgres"
    assert settings.shortterm.backend == "postgres"
    assert settings.state_in_postgres
    assert settings.postgres.dsn == "postgresql://memory:memory@pgvector:5432/memory"
    command = app["command"]
    assert command[:2] == ["memory-service", "serve"]
    args = build_parser().parse_args(command[1:])
    assert parse_workers(args.workers) == 2
