"""A single-threaded MCP server that reads its stdin late: `work(seconds)` blocks the event
loop (time.sleep in an async tool), so no further request is read until it returns. Many
simple servers behave so; a call abandoned at the guard's timeout leaves the next requests
unread in the pipe, to be read in a later call's window or between calls."""

from __future__ import annotations

import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

app = MCPServer("late-reader", log_level="WARNING")


@app.tool(description="Work for the given number of seconds, then answer.")
async def work(seconds: float = 0.0) -> str:
    time.sleep(seconds)  # noqa: ASYNC251 - blocks the loop on purpose: nothing is read
    return f"worked {seconds:g} s"


async def main() -> None:
    low = app._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        await low.run(read_stream, write_stream, low.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
