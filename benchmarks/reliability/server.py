"""A real ``memory-service serve`` process on a loopback port, for drivers and tests.

Why a subprocess: crash safety is only proven by a SIGKILL of the process that owns the
files, and concurrency by clients that share nothing with the server but a socket.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_keys(path: Path, tenants: dict[str, str], *, admin: bool = False) -> dict[str, str]:
    """A keys file with one fresh key per tenant (``{tenant: role}``); returns tenant -> key."""
    keys = {tenant: f"msk_rel_{tenant}_{secrets.token_hex(12)}" for tenant in tenants}
    entries = {key: {"tenant": tenant, "role": tenants[tenant]} for tenant, key in keys.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries), encoding="utf-8")
    return keys


@dataclass
class ServerProcess:
    """One ``serve`` process. ``start`` waits for /healthz; ``kill`` is SIGKILL, no goodbye."""

    workspace: Path
    keys_file: Path
    backend: str = "files"  # files | qdrant (Qdrant Edge under <workspace>/qdrant)
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    log_path: Path | None = None
    proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            MEMORY_WORKSPACE=str(self.workspace),
            MEMORY_API_KEYS_FILE=str(self.keys_file),
            MEMORY_LONGTERM__BACKEND=self.backend,
            MEMORY_EMBEDDING__THREADS="1",
        )
        env.update(self.env)
        return env

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> ServerProcess:
        """Start and wait until it answers; raise with its output if it dies or hangs."""
        self.port = self.port or free_port()
        self.log_path = self.log_path or self.workspace.parent / f"serve-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.output()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not answer in {timeout_s:.0f} s: {self.output()[-2000:]}")

    def run_to_exit(self, timeout_s: float = STARTUP_TIMEOUT_S) -> int:
        """Start and wait for the process to end by itself (a refused start); its exit code."""
        self.port = self.port or free_port()
        self.log_path = self.log_path or self.workspace.parent / f"serve-{self.port}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
            )
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def output(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL and reap: the crash a power cut or the OOM killer would cause."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """A clean stop (SIGTERM), SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
