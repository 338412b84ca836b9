"""What a new user sees when ``serve`` starts (and what the README shows), and keys changed
with ``memory-service keys`` while it runs: taken up without a restart."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.server import free_port, wait_healthy
from tests.support.waiting import wait_for_value

pytestmark = pytest.mark.subprocess  # every test starts `memory-service serve` or the CLI

REPO = Path(__file__).resolve().parents[2]


def _is_access_line(line: str) -> bool:
    """One JSON line per request (off a terminal the log format is JSON): the route template,
    the status and a trace id."""
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return (
        entry.get("logger") == "memory_service.access"
        and (entry.get("route"), entry.get("status")) == ("/healthz", 200)
        and len(entry.get("trace_id") or "") == 32
    )


def _env() -> dict[str, str]:
    """No MEMORY_* settings: the workspace is ./data, as after a fresh clone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return env


def _start(cwd: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
        cwd=cwd,
    )


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
    out, _ = proc.communicate(timeout=60)
    return out


def _shape(line: str) -> str:
    """The banner with what differs between runs (port, paths, key) replaced."""
    line = re.sub(r"http://127\.0\.0\.1:\d+", "URL", line)
    line = re.sub(r"msk_dev_[A-Za-z0-9_-]+", "KEY", line)
    return re.sub(r"/[^\s,()|]+", "PATH", line)


def _readme_banner() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return next(line for line in readme.splitlines() if line.startswith("memory-service listen"))


def test_serve_prints_one_line_with_absolute_paths_as_the_readme_shows(tmp_path):
    port = free_port()
    proc = _start(tmp_path, port)
    try:
        banner = proc.stdout.readline().rstrip("\n")
        wait_healthy(f"http://127.0.0.1:{port}")
    finally:
        rest = _stop(proc)
    keys_file = (tmp_path / "data" / "api-keys.json").resolve()
    assert f"API keys: {keys_file}, new development key for tenant 'default'" in banner
    assert f"docs: http://127.0.0.1:{port}/docs" in banner
    assert f"inspector: http://127.0.0.1:{port}/ui" in banner
    assert _shape(banner) == _shape(_readme_banner()), (banner, _readme_banner())
    others = [line for line in rest.splitlines() if not _is_access_line(line)]
    assert others == [], others  # one line, then one access-log line per request


def test_keys_added_and_revoked_while_serving_take_effect_without_a_restart(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(tmp_path, port)

    def cli(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "memory_service.cli", "keys", *argv],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=tmp_path,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def status(key: str) -> int:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.get(f"{base}/v1/usage", headers=headers, timeout=5).status_code

    def eventually(key: str, expected: int) -> None:
        wait_for_value(lambda: status(key), expected, timeout_s=10)

    try:
        proc.stdout.readline()
        wait_healthy(base)
        key = cli("add", "--tenant", "acme")
        eventually(key, 200)
        cli("revoke", key)
        eventually(key, 401)
    finally:
        _stop(proc)


def test_an_unreachable_postgresql_at_start_is_one_error_line_naming_the_dsn(tmp_path):
    env = {
        **_env(),
        "MEMORY_SHORTTERM__BACKEND": "postgres",
        "MEMORY_POSTGRES__DSN": "postgresql://postgres:s3cret@127.0.0.1:1/test",
        "MEMORY_POSTGRES__CONNECT_TIMEOUT_S": "3",  # time for several attempts
    }
    done = subprocess.run(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode != 0
    (line,) = done.stderr.splitlines()  # not one more per connection attempt
    assert "MEMORY_POSTGRES__DSN" in line and "Connection refused" in line, line
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr, done.stderr
    assert not (tmp_path / "data" / "tenants").exists()  # nothing written on the way out


def test_the_banner_comes_once_the_port_accepts_connections(tmp_path):
    """Whoever reads "listening" can connect at once: no retry, no wait."""
    port = free_port()
    proc = _start(tmp_path, port)
    try:
        banner = proc.stdout.readline()
        assert banner.startswith("memory-service listening on"), banner
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        _stop(proc)


def test_a_taken_port_is_one_error_line_and_no_banner(tmp_path):
    """Before: the banner, then uvicorn's "[Errno 98] ... address already in use", exit 3,
    and a development key minted that no banner showed. Now: the port is bound first."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=tmp_path,
            timeout=120,
        )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""  # no "listening" line
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"memory-service: error: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in lines[0] and "--port" in lines[0], lines[0]
    assert not (tmp_path / "data" / "api-keys.json").exists()  # no key minted unseen
