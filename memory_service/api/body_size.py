"""Refuse oversized request bodies before they are read whole (pure ASGI middleware)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """``max_bytes`` for every path, except the paths in ``per_path`` (an import body is a
    whole export file, far bigger than any other request needs to be)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, per_path: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.per_path = dict(per_path or {})

    def _limit(self, scope: Scope) -> int:
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return self.per_path.get(path.rstrip("/"), self.max_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self._limit(scope)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > max_bytes
                except ValueError:
                    too_big = True
                if too_big:
                    await self._refuse(send, max_bytes)
                    return
        seen = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    refused = True
                    raise _TooLarge
            return message

        started = False

        async def guarded_send(message: Message) -> None:
            # FastAPI turns an exception raised while it reads the body into its own 400
            # ("error parsing the body"); a body refused here answers 413, not that.
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(_TooLarge):  # answered below
            await self.app(scope, limited_receive, guarded_send)
        if refused and not started:
            await self._refuse(send, max_bytes)

    async def _refuse(self, send: Send, max_bytes: int) -> None:
        body = json.dumps(
            {
                "error": {
                    "code": "payload_too_large",
                    "message": f"request body is over {max_bytes} bytes",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
