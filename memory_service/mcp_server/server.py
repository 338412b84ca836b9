"""The MCP server over ``Services``: lists the tools a caller may use and runs their calls.

Built on the SDK's low-level ``Server`` rather than ``MCPServer``'s decorators, because the
argument schemas are the API's pydantic models and differ by the caller's key (an admin's take
``user_id``). Errors follow the protocol: an unknown tool is a JSON-RPC error (-32602); bad
arguments and refusals of the service are a result with ``isError`` whose one text content is
the API's error envelope, ``{"error": {"code", "message"}}``, so the model can correct itself;
nothing a caller sends stops the server.

An error result carries no ``structuredContent``: a client checks structured content against
the tool's output schema whenever it is present, on an error too (the TypeScript SDK, and so
the MCP Inspector, refuses the whole result with -32602 and the error is lost), and an error
never has the shape of the tool's result. A result that is not an error always has it: each
tool's value is validated against its declared result model here, in one place.
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
from pydantic import ValidationError

from memory_service import __version__
from memory_service.api.schemas.common import code_of
from memory_service.domain.errors import MemoryServiceError
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.tools import (
    McpTool,
    arguments_for,
    available,
    validate_arguments,
)
from memory_service.services.container import Services

log = logging.getLogger(__name__)

SERVER_NAME = "memory-service"
Identify = Callable[[ServerRequestContext[Any, Any]], Caller]


def _error(code: str, message: str) -> CallToolResult:
    """A tool error: the API's error envelope as text, and no structured content (see above)."""
    text = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _invalid(exc: ValidationError) -> CallToolResult:
    """One line naming each bad argument; the service's code when all share one."""
    errors = exc.errors()
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    codes = {code_of(e) or _original_code(e) or "invalid_arguments" for e in errors}
    code = codes.pop() if len(codes) == 1 else "invalid_arguments"
    return _error(code, "; ".join(parts) + more)


def _original_code(error: Any) -> str | None:
    original = (error.get("ctx") or {}).get("error")
    return original.code if isinstance(original, MemoryServiceError) else None


def _ok(tool: McpTool, value: Any) -> CallToolResult:
    """The tool's value as its declared result: ``structuredContent`` validated against the
    result model (a ``ValidationError`` here is the service's fault), and the same JSON as
    text for clients that read only text."""
    if tool.result is None:
        return CallToolResult(content=[TextContent(type="text", text=str(value))])
    data = tool.result.model_validate(value).model_dump(mode="json")
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
            sent = dict(params.arguments or {})
            if caller.principal.user_id is not None and "user_id" in sent:
                caller.context(str(sent.pop("user_id")))  # a personal key's: its user or 403
            args = validate_arguments(tool, caller.may_choose_user, sent)
            run_ctx = caller.context(getattr(args, "user_id", None))
            value = await anyio.to_thread.run_sync(tool.run, services, run_ctx, args)
        except ValidationError as exc:  # the arguments, or what the tool built of them
            return _invalid(exc)
        except MemoryServiceError as exc:
            if exc.http_status >= 500:  # at the error's own level, as the HTTP API logs it
                log.log(exc.log_level, "MCP tool %s (%s): %s", tool.name, exc.code, exc)
            return _error(exc.code, exc.message)
        except Exception:
            log.exception("MCP tool %s failed", tool.name)
            return _error("internal_error", "internal server error")
        try:
            return _ok(tool, value)
        except ValidationError as exc:  # e.g. a stored value the result model refuses
            log.exception("MCP tool %s: result did not validate", tool.name)
            return _error("internal_error", f"internal error: {exc.error_count()} bad fields")

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions="Long-term memory of one user: search, save, read and delete memories; "
        "keep facts under keys (extract, recall, consolidate, prune); search and read past "
        "sessions.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
