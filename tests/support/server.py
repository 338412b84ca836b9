"""A real ``memory-service serve`` process on a loopback port, for tests and the reliability
drivers: ``free_port``, ``clean_env``, ``wait_healthy``, ``ServerProcess`` and ``serve``.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    """A loopback port nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(workspace: Path, **extra: str) -> dict[str, str]:
    """The environment without the caller's MEMORY_* settings, on ``workspace``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MEMORY_WORKSPACE=str(workspace))
    env.update(extra)
    return env


def wait_healthy(
    base_url: str, proc: subprocess.Popen | None = None, timeout_s: float = STARTUP_TIMEOUT_S
) -> None:
    """Return once ``base_url``/healthz answers 200; raise if ``proc`` exits or time runs out.

    Polls: a server's readiness has no event a test could wait on but its socket."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode} before it answered")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{base_url} did not answer /healthz in {timeout_s:.0f} s")


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
        env = clean_env(self.workspace)
        env.update(
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
        try:
            wait_healthy(self.base_url, self.proc, timeout_s)
        except RuntimeError as exc:
            self.kill()
            raise RuntimeError(f"{exc}: {self.output()[-2000:]}") from None
        return self

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


@dataclass
class Served:
    base_url: str
    workspace: Path
    keys: dict[str, str] = field(default_factory=dict)  # name -> key
    log_path: Path | None = None  # the process's stdout and stderr

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path else ""


@contextmanager
def serve(workspace: Path, keys: dict[str, tuple[str, str]], **env: str) -> Iterator[Served]:
    """``serve`` on ``workspace`` with ``keys`` (name -> (tenant, role)) written by the key
    store (as ``memory-service keys add`` writes them), and ``env`` (settings as ``MEMORY_*``
    variables) added to a clean environment; stopped cleanly at the end."""
    from memory_service.stores.api_keys.files import FilesKeyStore

    workspace.mkdir(parents=True, exist_ok=True)
    keys_file = workspace / "api-keys.json"
    store = FilesKeyStore(keys_file)
    served = Served("", workspace)
    for name, (tenant, role) in keys.items():
        served.keys[name] = store.add(tenant, role)
    server = ServerProcess(workspace, keys_file, env=dict(env)).start()
    served.base_url, served.log_path = server.base_url, server.log_path
    try:
        yield served
    finally:
        server.stop()
