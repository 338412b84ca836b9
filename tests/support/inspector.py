"""The official MCP Inspector's CLI (``@modelcontextprotocol/inspector --cli``, from npm): the
TypeScript SDK's client, as a user runs it against ``memory-service mcp`` or ``/mcp``.

Installed once, with ``npm install``, into a cache folder that every later run (and every
xdist worker) reuses: ``~/.cache/memory-service/mcp-inspector/<versions>`` (or under
``MEMORY_TEST_NPM_CACHE``). The Inspector needs a newer Node than many machines have (2.12:
Node >= 22.19), so the pinned ``node`` package from npm is installed beside it and runs it;
the machine's own ``npm`` (any Node) only installs them. Versions are pinned: what the tests
check is one known client's behaviour, not whatever npm serves that day.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSPECTOR_VERSION = "2.12.0"
NODE_VERSION = "22.23.3"
INSTALL_TIMEOUT_S = 600.0
CALL_TIMEOUT_S = 120.0
# The Inspector gives a server 15 s to answer its first message by default; a stdio server
# loads its embedding model first, which takes longer than that on a loaded host.
CONNECT_TIMEOUT_MS = 90_000

# The Inspector's own install script does nothing when it is a dependency; node's fetches
# the platform's binary (npm 11 runs a dependency's install scripts only when allowed).
_PACKAGE = {
    "name": "memory-service-test-inspector",
    "private": True,
    "dependencies": {"@modelcontextprotocol/inspector": INSPECTOR_VERSION, "node": NODE_VERSION},
    "allowScripts": {
        f"node@{NODE_VERSION}": True,
        f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}": False,
    },
}


def cache_root() -> Path:
    base = os.environ.get("MEMORY_TEST_NPM_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "memory-service" / "mcp-inspector"
    return root / f"inspector-{INSPECTOR_VERSION}-node-{NODE_VERSION}"


def _node(folder: Path) -> Path:
    return folder / "node_modules" / "node" / "bin" / "node"


def _launcher(folder: Path) -> Path:
    inspector = folder / "node_modules" / "@modelcontextprotocol" / "inspector"
    return inspector / "clients" / "launcher" / "build" / "index.js"


def _installed(folder: Path) -> bool:
    return _node(folder).is_file() and _launcher(folder).is_file()


def install() -> Path:
    """The cache folder with the Inspector and its Node in it; installs them the first time
    (under a lock: parallel workers install once). A failed install raises with npm's output."""
    folder = cache_root()
    if _installed(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed(folder):
            return folder
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not on PATH: the MCP Inspector tests install it with npm")
        work = Path(tempfile.mkdtemp(prefix=".installing-", dir=folder.parent))
        try:
            (work / "package.json").write_text(json.dumps(_PACKAGE), encoding="utf-8")
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
            if done.returncode != 0 or not _installed(work):
                raise RuntimeError(
                    f"npm install of the MCP Inspector failed (rc {done.returncode}): "
                    f"{(done.stdout + done.stderr)[-3000:]}"
                )
            shutil.rmtree(folder, ignore_errors=True)
            work.rename(folder)  # whole, or not there: a killed install leaves no half folder
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


@dataclass(frozen=True)
class Answer:
    """What the Inspector CLI printed: ``result`` (its stdout, the JSON-RPC result) or None
    when it printed none, its stderr and exit code."""

    returncode: int
    result: dict[str, Any] | None
    stdout: str
    stderr: str

    def tool_error(self) -> dict[str, str]:
        """The tool's error as the client shows it: an ``isError`` result whose text is the
        service's error envelope (and no structured content for the client to refuse)."""
        assert self.result is not None, f"no result: {self.stdout!r} {self.stderr!r}"
        assert self.result.get("isError") is True, self.result
        assert "structuredContent" not in self.result, self.result
        (content,) = self.result["content"]
        return json.loads(content["text"])["error"]

    def structured(self) -> dict[str, Any]:
        """A successful result's structured content (the client checked it against the
        tool's output schema before printing it)."""
        assert self.returncode == 0, (self.stdout, self.stderr)
        assert self.result is not None and not self.result.get("isError"), self.result
        return self.result["structuredContent"]


def call(target: list[str], *options: str, cwd: Path | None = None) -> Answer:
    """``inspector --cli <target> <options>``: ``target`` is a URL (with ``--header``s in
    ``options``) or a command line (with ``-e NAME=VALUE`` for its environment)."""
    folder = install()
    env = {**os.environ, "MCP_CATALOG_PATH": str(folder / "catalog.json")}
    done = subprocess.run(
        [
            str(_node(folder)),
            str(_launcher(folder)),
            "--cli",
            "--connect-timeout",
            str(CONNECT_TIMEOUT_MS),
            *options,
            "--",
            *target,
        ],
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT_S,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        result = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        result = None
    return Answer(done.returncode, result, done.stdout, done.stderr)


def tool_call(name: str, **arguments: Any) -> list[str]:
    """The options of one ``tools/call``: each argument as ``--tool-arg key=value`` (the
    Inspector parses a value as JSON when it can: ``top_k=0`` is a number, ``top_k=abc`` a
    string)."""
    options = ["--method", "tools/call", "--tool-name", name]
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value)
        options += ["--tool-arg", f"{key}={text}"]
    return options
