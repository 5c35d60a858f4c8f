"""A small MCP client over the real 2.x SDK, for tests, the proxy's tests and the eval.

`open_stdio_client(cmd)` spawns `cmd` and speaks MCP over its stdio with `mcp.client.Client`;
every request is bounded by `request_timeout`, and leaving the block stops the server (the SDK's
shielded, bounded shutdown). Results are plain JSON dicts (wire names: `isError`,
`structuredContent`, `inputSchema`); a JSON-RPC error response raises `McpRpcError`.

How the 2.x SDK behaves (mcp 2.3.0, measured):
- Version: `mode="auto"` (the SDK default) probes `server/discover` and, against a 2.x
  server, adopts 2026-07-28 (no initialize handshake); `mode="legacy"` forces the
  initialize handshake (2025-11-25). Both are supported here.
- `_meta`: `Client.call_tool(name, args, meta={...})` sends it as `params._meta` of the
  `tools/call` request. At 2026-07-28 the SDK adds its own `io.modelcontextprotocol/*` keys
  beside ours, so a guard reads `params["_meta"]["mtguard/task"]` and ignores the rest.
  Server side, MCPServer hands it to tools as `ctx.request_context.meta`.
- Errors: a tool that raises, an unknown tool and invalid arguments all come back as a
  *result* with `isError: true` and the message as text content (no exception). Only a
  JSON-RPC error response (e.g. a server raising `MCPError`, METHOD_NOT_FOUND) raises
  `mcp.shared.exceptions.MCPError`, which we translate to `McpRpcError(code, message)`.
- `notifications/tools/list_changed`: at 2025-11-25 it arrives on the session and reaches
  `Client(message_handler=...)`; at 2026-07-28 it is never sent bare, only on a
  `subscriptions/listen` stream, which we open for tools when the version is modern (the
  session then tees each event to `message_handler` as the same notification). Either way
  it bumps `list_changed_count` and sets `list_changed`.
- The client's response cache is off (`cache=None`): a re-listing must reach the server.
- The server's environment is the SDK's safe default (HOME, PATH, USER, ...) plus `env`.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import mcp_types
from anyio.abc import TaskStatus
from mcp.client import Client, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# Cap on tools/list pages: a server whose cursor never ends cannot hang us.
MAX_LIST_PAGES = 100


class McpRpcError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        self.method = method
        self.code = code
        self.message = message
        self.data = data
        super().__init__(f"{method} failed with JSON-RPC error {code}: {message}")


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


class McpToolClient:
    """One connected session; create it with `open_stdio_client`."""

    def __init__(self, client: Client, timeout: float) -> None:
        self._client = client
        self.timeout = timeout
        self.list_changed_count = 0
        self.list_changed = anyio.Event()  # set by every notification, then replaced on wait

    @property
    def protocol_version(self) -> str:
        return self._client.protocol_version

    @property
    def sdk_client(self) -> Client:
        """The underlying `mcp.client.Client`, for what this wrapper does not cover."""
        return self._client

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            with anyio.fail_after(self.timeout):
                page = await self._rpc("tools/list", self._client.list_tools(cursor=cursor))
            tools.extend(_dump(tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def call_tool(
        self, name: str, args: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        with anyio.fail_after(self.timeout):
            result = await self._rpc(
                "tools/call",
                self._client.call_tool(name, args or {}, meta=meta),  # type: ignore[arg-type]
            )
        return _dump(result)

    async def wait_list_changed(self, count: int = 1) -> None:
        """Wait (bounded by `timeout`) until `count` list-changed notices have arrived."""
        with anyio.fail_after(self.timeout):
            while self.list_changed_count < count:
                await self.list_changed.wait()
                self.list_changed = anyio.Event()

    def _note_list_changed(self) -> None:
        self.list_changed_count += 1
        self.list_changed.set()

    async def _handle(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._note_list_changed()

    async def _listen(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._client.listen(tools_list_changed=True) as subscription:
            task_status.started()
            # The session also tees each event to message_handler as a
            # ToolListChangedNotification; counting happens there, once.
            async for _event in subscription:
                pass

    @staticmethod
    async def _rpc(method: str, pending: Any) -> Any:
        try:
            return await pending
        except MCPError as exc:
            raise McpRpcError(method, exc.code, exc.message, exc.data) from exc


@asynccontextmanager
async def open_stdio_client(
    cmd: Sequence[str],
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    *,
    mode: Literal["auto", "legacy"] = "auto",
    request_timeout: float = 30.0,
    errlog: TextIO | None = None,
) -> AsyncIterator[McpToolClient]:
    """Spawn `cmd` (argv list), connect, and yield a `McpToolClient`; stop it on exit."""
    if not cmd:
        raise ValueError("open_stdio_client needs a command")
    params = StdioServerParameters(command=cmd[0], args=list(cmd[1:]), env=env, cwd=cwd)
    holder: list[McpToolClient] = []

    async def handler(message: IncomingMessage) -> None:
        if holder:
            await holder[0]._handle(message)

    transport = stdio_client(params, errlog=errlog or sys.stderr)
    # read_timeout_seconds bounds each request, the handshake included: a cancel scope cannot
    # wrap entering the client (its task groups must outlive the scope).
    client = Client(
        transport,
        mode=mode,
        cache=None,
        message_handler=handler,
        read_timeout_seconds=request_timeout,
    )
    async with client:
        wrapper = McpToolClient(client, request_timeout)
        holder.append(wrapper)
        async with anyio.create_task_group() as tg:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                with anyio.fail_after(request_timeout):
                    await tg.start(wrapper._listen)
            yield wrapper
            tg.cancel_scope.cancel()
