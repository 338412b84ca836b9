"""README.md runs itself: every runnable block, in the order written, from a fresh workspace,
against a real ``memory-service serve``, each answer compared with what README shows.

How README marks its blocks, and what is masked in a comparison: ``tests/support/readme.py``.
The run is what a new user's is: a fresh checkout folder (``./data`` is the workspace, as
``make serve`` has it), ``serve`` with no keys file (it mints the development key and prints
it; ``KEY=msk_dev_...`` is that key), no LLM configured, the CLI on ``PATH`` (as after
``source .venv/bin/activate``), and one shell session for all the shell blocks.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.readme import (
    README_CHECKOUT,
    Bindings,
    Example,
    commands,
    examples,
    json_values,
    match_json,
    match_text,
    placeholders,
)
from tests.support.server import free_port, wait_healthy

pytestmark = pytest.mark.subprocess  # serve, a shell, the CLI and python processes

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BLOCK_TIMEOUT_S = 180.0
DONE = "__readme_block_done__"
# README_KEEP_GOING=1: run every block and report every mismatch (when updating README), not
# only the first (later blocks may depend on the state earlier ones leave)
KEEP_GOING = os.environ.get("README_KEEP_GOING") == "1"


def _env(home: Path) -> dict[str, str]:
    """No MEMORY_* settings (a fresh clone's defaults), this checkout's code, the CLI on
    PATH, Python's output unbuffered (the order a terminal shows stdout and stderr in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        PATH=f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def _cli_on_path(home: Path) -> None:
    """``memory-service`` as ``.venv/bin`` has it, running this interpreter on this checkout."""
    script = home / "bin" / "memory-service"
    script.parent.mkdir(parents=True)
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m memory_service.cli "$@"\n')
    script.chmod(0o755)


@dataclass
class Serving:
    proc: subprocess.Popen
    port: int
    key: str
    log: Path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    _cli_on_path(tmp_path)
    return tmp_path


@pytest.fixture
def checkout(home: Path) -> Path:
    """Stands for the reader's clone: ``./data`` in it is the workspace."""
    path = home / "memory-service"
    path.mkdir()
    return path


@pytest.fixture
def served(home: Path, checkout: Path) -> Iterator[Serving]:
    port = free_port()
    out, log = home / "serve.out", home / "serve.log"
    with open(out, "wb") as stdout, open(log, "wb") as stderr:
        proc = subprocess.Popen(
            ["memory-service", "serve", "--port", str(port)],
            stdout=stdout,
            stderr=stderr,
            cwd=checkout,
            env=_env(home),
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        banner = out.read_text(encoding="utf-8")
        found = re.search(r"new development key for tenant 'default': (msk_\S+)", banner)
        assert found, banner
        yield Serving(proc, port, found.group(1), log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


class Shell:
    """One bash session, as a reader's terminal: each block is sourced in it, so what one
    block sets the next one has."""

    def __init__(self, cwd: Path, env: dict[str, str], scratch: Path) -> None:
        self.scratch = scratch
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._n = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, script: str, *, merge: bool = False) -> tuple[int, str, str]:
        """Source ``script``; its exit status, stdout and stderr (``merge``: both in stdout,
        in the order written)."""
        self._n += 1
        path = self.scratch / f"block-{self._n}.sh"
        path.write_text(script, encoding="utf-8")
        out, err = path.with_suffix(".out"), path.with_suffix(".err")
        redirect = f'> "{out}" 2>&1' if merge else f'> "{out}" 2> "{err}"'
        assert self.proc.stdin is not None
        self.proc.stdin.write(f'. "{path}" {redirect} < /dev/null; echo "{DONE} $?"\n')
        self.proc.stdin.flush()
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer in {BLOCK_TIMEOUT_S:.0f} s:\n{script}") from None
            if line is None:
                raise AssertionError(f"the shell ended (did a block exit?):\n{script}")
            if line.startswith(DONE):
                status = int(line.split()[1])
                break
        read = lambda p: p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""  # noqa: E731
        return status, read(out), read(err)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _readable(text: str, checkout: Path) -> str:
    """Output as README shows it: paths under the checkout as the README's checkout."""
    return text.replace(str(checkout.resolve()), README_CHECKOUT).replace(
        str(checkout), README_CHECKOUT
    )


def test_every_readme_example_prints_what_readme_shows(served, home, checkout):
    runs = examples(README.read_text(encoding="utf-8"))
    assert {e.block.lang for e in runs} >= {"bash", "console", "python"}, "README has changed"
    env = _env(home)
    shell = Shell(checkout, env, home)
    bindings = Bindings()
    failures: list[str] = []
    try:
        for example in runs:
            where = f"README.md line {example.block.line} ({example.block.lang})"
            try:
                _run(example, shell, served, bindings, checkout, env, home)
            except AssertionError as exc:
                failures.append(f"{where}: {exc}")
                if not KEEP_GOING:
                    break
    finally:
        shell.close()
    if failures:
        log = served.log.read_text(encoding="utf-8", errors="replace")[-3000:]
        pytest.fail("\n\n".join([*failures, f"serve's log (end):\n{log}"]), pytrace=False)


def _run(example: Example, shell: Shell, served: Serving, bindings, checkout, env, home) -> None:
    block = example.block
    command = bindings.substitute(placeholders(block.text, served.port, served.key))
    if block.lang == "console":
        for written, shown in commands(placeholders(block.text, served.port, served.key)):
            line = bindings.substitute(written)  # what the lines above printed, named
            status, printed, _ = shell.run(line + "\n", merge=True)
            assert status == 0, f"$ {line} exited {status}:\n{printed}"
            why = match_text(shown, _readable(printed, checkout), bindings, literal=line)
            assert why is None, f"$ {line}\n{why}"
        return
    if block.lang == "python":
        script = home / f"readme-{block.line}.py"
        script.write_text(command, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            cwd=checkout,
            env=env,
            timeout=BLOCK_TIMEOUT_S,
        )
        assert done.returncode == 0, f"exited {done.returncode}:\n{done.stdout}{done.stderr}"
        printed = _readable(done.stdout, checkout)
        if example.expected is None:
            assert not printed.strip(), f"prints\n{printed}\nbut README shows no output"
            return
        why = match_text(example.expected.text, printed, bindings, literal=command)
        assert why is None, why
        return
    status, printed, errors = shell.run(command)
    assert status == 0, f"exited {status}:\n{printed}{errors}"
    if example.expected is None:
        assert not printed.strip(), f"prints\n{printed}\nbut README shows no ```json after it"
        return
    shown = json_values(example.expected.text)
    try:
        answers = json_values(printed)
    except ValueError:
        raise AssertionError(f"printed what is not JSON:\n{printed}{errors}") from None
    assert len(answers) == len(shown), (
        f"README shows {len(shown)} answers, it printed {len(answers)}:\n{printed}{errors}"
    )
    for n, (want, got) in enumerate(zip(shown, answers, strict=True)):
        why = match_json(want, got, bindings, where=f"answer {n + 1}")
        assert why is None, f"{why}\nprinted:\n{printed}"
