"""A real ``memory-service serve`` process on a loopback port, with keys written by the key
store (as ``memory-service keys add`` writes them): for tests of its HTTP clients."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from memory_service.api.key_store import KeyStore


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(workspace: Path, **extra: str) -> dict[str, str]:
    """The environment without the caller's MEMORY_* settings, on ``workspace``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(HF_HUB_OFFLINE="1", MEMORY_WORKSPACE=str(workspace), **extra)
    return env


@dataclass
class Served:
    base_url: str
    workspace: Path
    keys: dict[str, str] = field(default_factory=dict)  # name -> key
    output: list[str] = field(default_factory=list)


@contextmanager
def serve(workspace: Path, keys: dict[str, tuple[str, str]], **env: str) -> Iterator[Served]:
    """``serve`` on ``workspace`` with ``keys`` (name -> (tenant, role)) in its keys file,
    and ``env`` (settings as ``MEMORY_*`` variables) added to a clean environment."""
    workspace.mkdir(parents=True, exist_ok=True)
    store = KeyStore(workspace / "api-keys.json")
    served = Served("", workspace)
    for name, (tenant, role) in keys.items():
        served.keys[name] = store.add(tenant, role)
    port = free_port()
    served.base_url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(workspace, **env),
    )
    try:
        served.output.append(proc.stdout.readline())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, "".join(served.output) + proc.stdout.read()
            try:
                if httpx.get(f"{served.base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield served
    finally:
        proc.terminate()
        proc.wait(timeout=30)
