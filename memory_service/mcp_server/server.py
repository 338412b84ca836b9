"""The MCP server over ``Services``: lists the tools a caller may use and runs their calls.

Built on the SDK's low-level ``Server`` rather than ``MCPServer``'s decorators, because the
argument schemas are the API's pydantic models and differ by the caller's key (an admin's take
``user_id``). Errors follow the protocol: an unknown tool is a JSON-RPC error (-32602); bad
arguments and refusals of the service are a result with ``is_error`` and the service's error
code (``{"error": {"code", "message"}}``), so the model can correct itself; nothing a caller
sends stops the server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from mcp.types.jsonrpc import INVALID_PARAMS
from pydantic import BaseModel, ValidationError

from memory_service import __version__
from memory_service.api.schemas.common import code_of
from memory_service.errors import MemoryServiceError
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.tools import McpTool, arguments_for, available
from memory_service.services.container import Services

log = logging.getLogger(__name__)

SERVER_NAME = "memory-service"
Identify = Callable[[ServerRequestContext[Any, Any]], Caller]


def _error(code: str, message: str) -> CallToolResult:
    body = {"error": {"code": code, "message": message}}
    return CallToolResult(
        content=[TextContent(type="text", text=f"error ({code}): {message}")],
        structured_content=body,
        is_error=True,
    )


def _invalid(exc: ValidationError) -> CallToolResult:
    """One line naming each bad argument; the service's code when all share one."""
    errors = exc.errors()
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    codes = {code_of(e) or _original_code(e) or "invalid_arguments" for e in errors}
    return _error(codes.pop() if len(codes) == 1 else "invalid_arguments", "; ".join(parts))


def _original_code(error: Any) -> str | None:
    original = (error.get("ctx") or {}).get("error")
    return original.code if isinstance(original, MemoryServiceError) else None


def _ok(value: BaseModel | str) -> CallToolResult:
    if isinstance(value, str):
        return CallToolResult(content=[TextContent(type="text", text=value)])
    data = value.model_dump(mode="json")
    text = json.dumps(data, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _describe(tool: McpTool, caller: Caller) -> Tool:
    arguments = arguments_for(tool, caller.may_choose_user)
    return Tool(
        name=tool.name,
        description=tool.description,
        input_schema=arguments.model_json_schema(),
        output_schema=tool.result.model_json_schema(mode="serialization") if tool.result else None,
        annotations=ToolAnnotations(
            read_only_hint=tool.read_only, destructive_hint=not tool.read_only
        ),
    )


def build_server(services: Services, identify: Identify) -> Server:
    """A server whose every request acts for ``identify(request context)``."""
    tools = available(services)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _: PaginatedRequestParams | None
    ) -> ListToolsResult:
        caller = identify(ctx)
        return ListToolsResult(tools=[_describe(tool, caller) for tool in tools.values()])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        tool = tools.get(params.name)
        if tool is None:
            raise MCPError(
                INVALID_PARAMS, f"unknown tool {params.name!r}; available: {', '.join(tools)}"
            )
        caller = identify(ctx)
        try:
            args = arguments_for(tool, caller.may_choose_user).model_validate(
                params.arguments or {}
            )
        except ValidationError as exc:
            return _invalid(exc)
        try:
            run_ctx = caller.context(getattr(args, "user_id", None))
            result = await anyio.to_thread.run_sync(tool.run, services, run_ctx, args)
        except ValidationError as exc:  # e.g. a stored value an output model refuses
            log.exception("MCP tool %s: result did not validate", tool.name)
            return _error("internal_error", f"internal error: {exc.error_count()} bad fields")
        except MemoryServiceError as exc:
            if exc.http_status >= 500:
                log.error("MCP tool %s: %s", tool.name, exc)
            return _error(exc.code, exc.message)
        except Exception:
            log.exception("MCP tool %s failed", tool.name)
            return _error("internal_error", "internal server error")
        return _ok(result)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions="Long-term memory of one user: search, save, read and delete memories; "
        "search and read past sessions.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
