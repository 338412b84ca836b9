"""Every entry point of one service, driven as its callers drive it, each answering with the
error code it gave: the HTTP API (FastAPI's TestClient), MCP (the SDK's in-process client),
the model-facing memory tools, and the CLI (which prints the message, not the code)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from anyio.from_thread import start_blocking_portal
from mcp import Client

from memory_service.api.keys import Principal
from memory_service.cli import main
from memory_service.domain.messages import ToolCall
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.tools import MemoryTools
from tests.support.api import auth


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int | None  # HTTP's; None elsewhere
    code: str | None  # None: the entry point does not say it (the CLI)
    message: str


class EntryPoints:
    """The API, MCP and the memory tools over the same services (tenant ``acme``, user
    ``alice``, an application key), and the CLI on their workspace."""

    def __init__(self, services: Any, client: Any) -> None:
        self.services, self.client = services, client
        self.workspace = services.settings.workspace
        caller = Caller(Principal("acme", "application", "t"), "alice")
        self.server = build_server(services, lambda _ctx: caller)
        self.tools = MemoryTools(self.workspace, services.longterm, services.shortterm)
        self._open = contextlib.ExitStack()

    def __enter__(self) -> EntryPoints:
        portal = self._open.enter_context(start_blocking_portal())
        self._mcp = self._open.enter_context(portal.wrap_async_context_manager(Client(self.server)))
        self._portal = portal
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._open.close()

    def http(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> Refusal:
        headers = auth(key) if key else auth()
        response = self.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code >= 400, response.text
        error = response.json()["error"]
        return Refusal(response.status_code, error["code"], error["message"])

    def mcp(self, tool: str, arguments: dict[str, Any]) -> Refusal:
        async def call(client: Client) -> Any:
            return await client.call_tool(tool, arguments)

        result = self._portal.call(call, self._mcp)
        assert result.is_error, result
        error = json.loads("".join(getattr(c, "text", "") for c in result.content))["error"]
        return Refusal(None, error["code"], error["message"])

    def tool(self, ctx: Any, name: str, arguments: dict[str, Any]) -> Refusal:
        outcome = self.tools.run(ctx, ToolCall("call-1", name, json.dumps(arguments)))
        assert not outcome.ok, outcome.text
        return Refusal(None, outcome.error_code, outcome.text)

    def cli(self, capsys: Any, *argv: str) -> Refusal:
        command, *rest = argv
        assert main([command, "--workspace", str(self.workspace), *rest]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        return Refusal(None, None, line.removeprefix("memory-service: error: "))
