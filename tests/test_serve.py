"""``memory-service serve`` as a user starts it: a real process on a loopback port."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.server import free_port, wait_healthy

pytestmark = pytest.mark.subprocess  # every test starts `memory-service serve`


def test_serve_prints_where_and_creates_a_dev_key(tmp_path: Path):
    port = free_port()
    workspace = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(HF_HUB_OFFLINE="1", MEMORY_WORKSPACE=str(workspace))
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        banner = proc.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in banner, banner
        assert "long-term backend: files" in banner and str(workspace) in banner
        key = re.search(r"development key for tenant 'default': (\S+)", banner).group(1)
        assert (workspace / "api-keys.json").exists()
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc)
        headers = {"Authorization": f"Bearer {key}"}
        recorded = httpx.post(
            f"{base}/v1/memories",
            json={"user_id": "alice", "facts": [{"text": "Alice is allergic to peanuts"}]},
            headers=headers,
        )
        assert recorded.status_code == 200
        hits = httpx.post(
            f"{base}/v1/memories/search",
            json={"user_id": "alice", "query": "peanut allergy"},
            headers=headers,
        ).json()["hits"]
        assert hits[0]["text"] == "Alice is allergic to peanuts"
        assert httpx.get(f"{base}/v1/memories", params={"user_id": "alice"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A restart reuses the stored key instead of minting another.
    assert "development key" not in _banner_of_restart(workspace, env)


def _banner_of_restart(workspace: Path, env: dict[str, str]) -> str:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        return proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
