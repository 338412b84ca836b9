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


def test_accepted_connections_send_small_responses_without_waiting_for_acks():
    """A kept-alive client gets each small response at once only if Nagle's algorithm is off
    on the accepted socket: read the option from a live connection to the listener ``serve``
    binds, served by uvicorn as ``serve`` runs it."""
    import socket
    import threading

    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from memory_service.commands.serve import bind_listener

    seen: list[int] = []

    class Recording(H11Protocol):
        def connection_made(self, transport):  # type: ignore[no-untyped-def]
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            super().connection_made(transport)

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    listener = bind_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, http=Recording, lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            assert [client.get("/").status_code for _ in range(3)] == [200] * 3
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()
    assert seen and all(seen), f"TCP_NODELAY per accepted connection: {seen}"


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["PORT=9123"], "memory-service serve --port 9123"),
        ([], "memory-service serve"),  # MEMORY_API__PORT, else 8080
    ],
)
def test_make_serve_takes_the_port_it_is_given(tmp_path: Path, args, command):
    """``make serve PORT=…`` serves on that port; a ``PORT`` merely in the environment (set
    for some other program) does not move it. ``make -n`` prints the command, runs nothing."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml: no set-up lines
    done = subprocess.run(
        # also under `make test`: the outer make's variables would make this one a sub-make
        # that announces its directory
        ["make", "-n", "--no-print-directory", "serve", f"VENV={venv}", *args],
        cwd=Path(__file__).resolve().parents[2],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MAKE")}, "PORT": "3000"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{venv}/bin/{command}"]
