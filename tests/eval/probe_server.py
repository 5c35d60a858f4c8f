"""A tiny MCP server the client-wrapper tests drive: shows its _meta and pid, fails on demand."""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

app = MCPServer("probe", log_level="ERROR")


@app.tool(structured_output=False)
def show_meta(ctx: Context) -> str:
    """The request's _meta as the server received it, and this process's pid."""
    return json.dumps({"meta": ctx.request_context.meta, "pid": os.getpid()})


@app.tool(structured_output=False)
def tool_error() -> str:
    """A tool that fails: reported as a result with isError."""
    raise ValueError("tool exploded")


@app.tool(structured_output=False)
def rpc_error() -> str:
    """A JSON-RPC error response instead of a result."""
    raise MCPError(-32042, "refused by probe", {"why": "test"})


@app.tool(structured_output=False)
def many(count: int) -> str:
    """A large result: `count` characters."""
    return "x" * count


if __name__ == "__main__":
    app.run()
