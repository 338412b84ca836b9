"""``serve --workers N`` and several ``serve`` processes over one database: real processes,
real sockets, the project's client.

The processes share only PostgreSQL (with pgvector: the embedded test server): the long-term
facts (``MEMORY_LONGTERM__BACKEND=postgres``) and the replica state (keys, usage, sessions,
tombstones); each ``serve`` has a workspace of its own. What a user must be able to count on:
a write one process acknowledged is read by any other at once; mixed load over two workers
answers every call; a worker killed under load loses no acknowledged write and is replaced
while the other serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_service.cli import main
from tests.support import pgvector
from tests.support.mixed_load import lost_writes, mixed_load
from tests.support.server import ServerProcess, clean_env, free_port
from tests.support.waiting import wait_for_value

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres]

TENANT = "acme"


@pytest.fixture(scope="module")
def deployment() -> Iterator[dict[str, str]]:
    """The settings every process of one deployment shares (a schema of its own on the
    pgvector server), and an admin key of ``TENANT`` in it."""
    import psycopg

    from memory_service.stores.api_keys.postgres import PostgresKeyStore
    from memory_service.stores.database import Database

    dsn, schema = pgvector.dsn(), f"t_{uuid.uuid4().hex[:16]}"
    database = Database(dsn, schema=schema, pool_max=1)
    try:
        key = PostgresKeyStore(database).add(TENANT, "admin")
    finally:
        database.close()
    yield {
        "MEMORY_LONGTERM__BACKEND": "postgres",
        "MEMORY_STATE__BACKEND": "postgres",
        "MEMORY_POSTGRES__DSN": dsn,
        "MEMORY_POSTGRES__SCHEMA_NAME": schema,
        "key": key,
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _server(deployment: dict[str, str], workspace: Path, workers: int = 1) -> ServerProcess:
    env = {k: v for k, v in deployment.items() if k.startswith("MEMORY_")}
    return ServerProcess(workspace, None, "postgres", env=env, workers=workers)


@pytest.fixture(scope="module")
def two_workers(deployment, tmp_path_factory) -> Iterator[ServerProcess]:
    server = _server(deployment, tmp_path_factory.mktemp("workers") / "ws", workers=2).start()
    try:
        yield server
    finally:
        server.stop()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie left to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_two_workers_start_behind_one_banner_on_one_port(two_workers):
    banner = [line for line in two_workers.output().splitlines() if "listening on" in line]
    assert len(banner) == 1, two_workers.output()
    assert banner[0].endswith("| 2 worker processes")
    assert f":{two_workers.port} " in banner[0]
    assert len(two_workers.worker_pids()) == 2


def test_a_write_acknowledged_by_one_process_is_read_by_another_at_once(
    deployment, two_workers, tmp_path
):
    """A second process (its own ``serve``, port and workspace) beside the workers: what
    one acknowledged, the other reads in the very next request, by id, by search and in the
    list, both ways."""
    from memory_service.client import MemoryClient

    key = deployment["key"]
    with (
        _server(deployment, tmp_path / "ws") as single,
        MemoryClient(single.base_url, key) as one,
        MemoryClient(two_workers.base_url, key) as many,
    ):
        for writer, reader, text in (
            (one, many, "Ravi's locker code is 4417"),
            (many, one, "Ravi parks on level minus two"),
        ):
            fact_id = writer.record("ravi", [text]).results[0].id
            assert reader.get("ravi", fact_id).text == text
            hits = reader.search("ravi", text, top_k=1).hits
            assert [hit.id for hit in hits] == [fact_id]
            assert fact_id in {fact.id for fact in reader.list_memories("ravi").items}


def test_mixed_load_over_two_workers_answers_every_call_and_loses_no_write(deployment, two_workers):
    key = deployment["key"]
    pids = two_workers.worker_pids()
    before = {pid: _cpu_seconds(pid) for pid in pids}
    load = mixed_load(two_workers.base_url, key, clients=8, seconds=4.0, ramp_s=1.0)
    result = asyncio.run(load)
    busy = {pid: _cpu_seconds(pid) - before[pid] for pid in pids}
    assert dict(result.errors) == {}
    assert result.written and result.search_ms
    assert asyncio.run(lost_writes(two_workers.base_url, key, result.written)) == []
    assert all(seconds > 0.1 for seconds in busy.values()), busy  # both served the load


def test_sigkill_of_one_worker_under_load_loses_no_acknowledged_write(deployment, two_workers):
    key = deployment["key"]
    victim = two_workers.worker_pids()[1]
    killed_at: list[float] = []

    async def load_and_kill():
        async def kill_soon():
            await asyncio.sleep(1.5)
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.monotonic())

        load = mixed_load(two_workers.base_url, key, clients=8, seconds=5.0, seed=11)
        result, _ = await asyncio.gather(load, kill_soon())
        return result

    result = asyncio.run(load_and_kill())
    # the calls in flight on the killed worker's connections fail (unacknowledged); the
    # surviving worker goes on answering, and every write it or the victim acknowledged stays
    assert [t for t in result.answered_at if t > killed_at[0] + 1.0], result.errors
    assert set(result.errors) <= {"transport (record)", "transport (search)"}, result.errors
    assert asyncio.run(lost_writes(two_workers.base_url, key, result.written)) == []
    wait_for_value(lambda: len(two_workers.worker_pids()), 2, timeout_s=60)
    assert victim not in two_workers.worker_pids()
    assert "was killed by SIGKILL" in two_workers.output()


@pytest.mark.parametrize("value", ["0", "-1", "two", "65", "1.5"])
def test_a_bad_worker_count_is_one_error_line(value, capsys):
    assert main(["serve", "--workers", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"memory-service: error: --workers: expected a whole number from 1 to 64, got {value!r}"
    ]


def test_workers_over_a_qdrant_edge_folder_are_refused_before_the_port_is_taken(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "qdrant")
    port = free_port()
    assert main(["serve", "--workers", "2", "--port", str(port), "--workspace", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--workers 2: the long-term backend is a Qdrant Edge folder" in line
    assert not (tmp_path / "api-keys.json").exists()  # no key minted, nothing loaded


def test_the_workers_stop_with_their_supervisor_even_when_it_is_killed(tmp_path):
    """A fresh workspace: the development key is minted once (not once per worker) and shown
    in the one banner; SIGKILL of the supervisor leaves no worker behind."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--workers", "2"]
        + ["--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(tmp_path / "ws", MEMORY_EMBEDDING__THREADS="1"),
    )
    try:
        banner = proc.stdout.readline()
        pid = proc.pid
        workers = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert "new development key for tenant 'default'" in banner, banner
    assert banner.rstrip().endswith("| 2 worker processes")
    assert len(json.loads((tmp_path / "ws" / "api-keys.json").read_text())) == 1
    assert len(workers) == 2
    for worker in map(int, workers):
        wait_for_value(lambda w=worker: _running(w), False, timeout_s=30)
