"""``serve --workers N``: one supervising process and N worker processes on one socket.

Why processes: one process serves on one core at a time (the GIL); a second core is used by a
second process. Why one socket: the supervisor binds the port once (a taken port is one error
line before anything loads) and every worker accepts on it, so clients and load balancers see
one address and the kernel hands each new connection to one worker; a kept-alive connection
stays with the worker that accepted it.

The supervisor settles the API keys first (a development key is minted once, not once per
worker), then starts each worker as ``python -m memory_service.commands.workers`` with the
listening socket inherited. A worker builds its own services (model, pools, caches) and shares
with the others only what the stores share: PostgreSQL, a Qdrant server, the workspace's locked
files. Only the first worker runs the maintenance scheduler. The banner is printed once every
worker accepts connections; a worker that dies afterwards (SIGKILL, the OOM killer) is replaced
at once, or after a growing pause if it keeps dying before it serves; SIGINT or SIGTERM stops them
all gracefully (what is in flight is answered first).

Each worker writes one line to its status pipe, ``ready <storage>`` or ``error <message>``.
Its stdin is the supervisor's lifeline: at EOF (the supervisor died, SIGKILL included) the
worker stops as if sent SIGTERM, so no worker outlives its supervisor.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memory_service.commands.serving import banner, serve_app, url_host
from memory_service.domain.errors import ConfigurationError, MemoryServiceError

if TYPE_CHECKING:
    from memory_service.api.keys import KeySource
    from memory_service.config.settings import Settings

log = logging.getLogger("memory_service.serve")

MAX_WORKERS = 64
STOP_GRACE_S = 30.0  # a worker still busy this long after SIGTERM is killed
MAX_PAUSE_S = 30.0  # the longest pause before starting again a worker that keeps failing


def parse_workers(value: str) -> int:
    """``--workers`` as a count, or one ``ConfigurationError`` line."""
    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_WORKERS:
        raise ConfigurationError(
            f"--workers: expected a whole number from 1 to {MAX_WORKERS}, got {value!r}"
        )
    return count


def check_shareable(settings: Settings, count: int) -> None:
    """Refuse, before anything is bound or loaded, stores that belong to one process."""
    if settings.longterm.backend != "qdrant" or (
        settings.qdrant.url and settings.qdrant.url != ":memory:"
    ):
        return
    what = "qdrant-client's local mode" if settings.qdrant.url else "a Qdrant Edge folder"
    raise ConfigurationError(
        f"--workers {count}: the long-term backend is {what}, which one process owns; "
        "several workers need MEMORY_LONGTERM__BACKEND=files, a Qdrant server "
        "(MEMORY_QDRANT__URL) or PostgreSQL"
    )


def worker_threads(settings: Settings, count: int) -> int | None:
    """The embedder's threads per worker when none are configured: the cores shared out, so
    N workers do not each start min(4, cores) threads on the same cores."""
    if settings.embedding.threads is not None:
        return None
    return max(1, min(4, (os.cpu_count() or 1) // count))


def settle_keys(settings: Settings) -> tuple[KeySource, Callable[[], None]]:
    """The keys every worker will read (the development key minted here, once), and what
    closes the database they were read from (after the banner, which counts them)."""
    from memory_service.api.keys import load_key_ring
    from memory_service.stores.build import open_database
    from memory_service.stores.fsutil import ensure_dir

    ensure_dir(settings.workspace)
    database = open_database(settings)
    try:
        keys = load_key_ring(settings, database)
    except BaseException:
        if database is not None:
            database.close()
        raise
    return keys, (database.close if database is not None else lambda: None)


def supervise(settings: Settings, host: str, listener: socket.socket, count: int) -> int:
    """Run ``count`` workers on ``listener`` until SIGINT or SIGTERM; 0 when stopped so."""
    keys, close_keys = settle_keys(settings)
    env = dict(os.environ, MEMORY_WORKSPACE=str(settings.workspace.resolve()))
    threads = worker_threads(settings, count)
    if threads is not None:
        env["MEMORY_EMBEDDING__THREADS"] = str(threads)
    supervisor = Supervisor(listener, host, count, env)
    try:
        try:
            storage = supervisor.start()
            if storage is not None:
                url = f"http://{url_host(host)}:{listener.getsockname()[1]}"
                print(banner(url, storage, keys, workers=count), flush=True)
        finally:
            close_keys()
        if storage is not None:  # else told to stop while the workers started
            supervisor.watch()
    finally:
        supervisor.stop()
    return 0


@dataclass
class _Worker:
    slot: int
    proc: subprocess.Popen
    status_fd: int
    started_at: float
    pending: bytes = b""
    ready: bool = False
    storage: str = ""
    error: str = ""

    def lines(self, data: bytes) -> list[str]:
        self.pending += data
        *done, self.pending = self.pending.split(b"\n")
        return [line.decode("utf-8", "replace") for line in done]


@dataclass
class Supervisor:
    """Starts, watches, replaces and stops the workers (in the supervising process)."""

    listener: socket.socket
    host: str
    count: int
    env: dict[str, str]
    workers: dict[int, _Worker] = field(default_factory=dict)
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _stopping: bool = False
    _serving: bool = False
    _failed_starts: dict[int, int] = field(default_factory=dict)
    _restart_at: dict[int, float] = field(default_factory=dict)

    def start(self) -> str | None:
        """Start every worker and wait until each accepts connections; the storage they
        describe, or None if SIGINT/SIGTERM came first. A worker that fails to start stops
        them all: its error, or its exit, is raised."""
        self._trap_signals()
        for slot in range(self.count):
            self._spawn(slot)
        while not all(w.ready for w in self.workers.values()):
            if self._stopping:
                return None
            for worker in self._poll():
                self.stop()
                if worker.error:
                    raise MemoryServiceError(worker.error, code="worker_failed")
                raise MemoryServiceError(
                    f"worker {worker.slot + 1} exited ({_exit(worker.proc.returncode)}) "
                    "before it served: its output is above",
                    code="worker_failed",
                )
        self._serving = True
        return self.workers[0].storage

    def watch(self) -> None:
        """Replace workers that die until SIGINT or SIGTERM."""
        while not self._stopping:
            for worker in self._poll():
                self._replace_later(worker)
            now = time.monotonic()
            for slot, when in list(self._restart_at.items()):
                if when <= now and not self._stopping:
                    del self._restart_at[slot]
                    self._spawn(slot)

    def stop(self) -> None:
        """SIGTERM to every worker, SIGKILL to those still running ``STOP_GRACE_S`` later."""
        self._stopping = True
        live = [w for w in self.workers.values() if w.proc.poll() is None]
        for worker in live:
            worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in live:
            try:
                worker.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "worker %d (pid %d) did not stop: killed", worker.slot + 1, worker.proc.pid
                )
                worker.proc.kill()
                worker.proc.wait()
        for worker in list(self.workers.values()):
            self._forget(worker)

    def _spawn(self, slot: int) -> None:
        read_fd, write_fd = os.pipe()
        argv = [
            sys.executable,
            "-m",
            "memory_service.commands.workers",
            "--listen-fd",
            str(self.listener.fileno()),
            "--status-fd",
            str(write_fd),
            "--host",
            self.host,
            "--slot",
            str(slot),
        ]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,  # the lifeline: EOF when this process is gone
                pass_fds=(self.listener.fileno(), write_fd),
                env=self.env,
                process_group=0,  # a terminal's Ctrl-C reaches the supervisor, which stops them
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        worker = _Worker(slot, proc, read_fd, time.monotonic())
        self.workers[slot] = worker
        self._selector.register(read_fd, selectors.EVENT_READ, worker)

    def _poll(self, timeout: float = 0.5) -> list[_Worker]:
        """Read the status pipes for up to ``timeout``; the workers that ended meanwhile."""
        ended = []
        for key, _ in self._selector.select(timeout):
            worker: _Worker = key.data
            try:
                data = os.read(worker.status_fd, 4096)
            except BlockingIOError:
                continue
            if not data:  # every writer gone: the worker exited
                worker.proc.wait()
                self._forget(worker)
                ended.append(worker)
                continue
            for line in worker.lines(data):
                kind, _, rest = line.partition(" ")
                if kind == "ready":
                    worker.ready, worker.storage = True, rest
                elif kind == "error":
                    worker.error = rest
                    if self._serving:
                        log.error("worker %d could not start: %s", worker.slot + 1, rest)
        return ended

    def _replace_later(self, worker: _Worker) -> None:
        lived = time.monotonic() - worker.started_at
        # one that served is replaced at once; one that died before it served (the database
        # down, the model missing) would die again at once: each retry waits twice as long
        failed = 0 if worker.ready else self._failed_starts.get(worker.slot, 0) + 1
        self._failed_starts[worker.slot] = failed
        pause = 0.0 if failed == 0 else min(MAX_PAUSE_S, 2.0 ** (failed - 1))
        log.warning(
            "worker %d (pid %d) %s after %.0f s: starting another%s",
            worker.slot + 1,
            worker.proc.pid,
            _exit(worker.proc.returncode),
            lived,
            f" in {pause:.0f} s" if pause else "",
        )
        self._restart_at[worker.slot] = time.monotonic() + pause

    def _forget(self, worker: _Worker) -> None:
        if worker.status_fd >= 0:
            self._selector.unregister(worker.status_fd)
            os.close(worker.status_fd)
            worker.status_fd = -1
        if worker.proc.stdin is not None and not worker.proc.stdin.closed:
            worker.proc.stdin.close()

    def _trap_signals(self) -> None:
        def stop(signum: int, frame: object) -> None:
            self._stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


# -- the worker side ----------------------------------------------------------------------------


def _stop_when_orphaned() -> None:
    """Block on stdin; at EOF the supervisor is gone: stop as SIGTERM would."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def worker_main(argv: Sequence[str] | None = None) -> int:
    """One worker: serve the inherited socket; say ``ready`` or ``error`` on the status pipe."""
    from memory_service.config.settings import load_settings
    from memory_service.observe.logs import configure_logging

    parser = argparse.ArgumentParser(prog="memory-service serve worker")
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--status-fd", type=int, required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--slot", type=int, required=True)
    args = parser.parse_args(argv)
    status = os.fdopen(args.status_fd, "w", encoding="utf-8", buffering=1)
    threading.Thread(target=_stop_when_orphaned, name="lifeline", daemon=True).start()

    def tell(line: str) -> None:
        with contextlib.suppress(OSError):  # the supervisor gone, the lifeline stops this one
            status.write(" ".join(line.split()) + "\n")

    try:
        settings = load_settings()
        observability = settings.observability
        configure_logging(observability.log_format, observability.log_level)
        for noisy in ("sentence_transformers", "httpx", "transformers"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        listener = socket.socket(fileno=args.listen_fd)
        serve_app(
            settings,
            args.host,
            listener,
            lambda storage, keys: tell(f"ready {storage}"),
            background=args.slot == 0,
        )
    except MemoryServiceError as exc:
        tell(f"error {exc.message}")
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(worker_main())
