"""Plumbing every example server shares: construction with the attack layer, stdio serving.

`create_server(name, default_target)` returns an MCPServer whose tools/list and tools/call
pass through `AttackMiddleware` (inert unless MTGUARD_* attack variables are set);
`run(app)` serves it over stdio, advertising `tools.listChanged` so a rug pull can announce
itself. Nothing here depends on the working directory: data paths are relative to this file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server import NotificationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _attacks import AttackMiddleware, from_env

DATA_DIR = Path(__file__).resolve().parent / "data"


def create_server(name: str, default_target: str, instructions: str | None = None) -> MCPServer:
    bus = InMemorySubscriptionBus()
    attacks = AttackMiddleware(from_env(default_target), bus)
    return MCPServer(
        name,
        instructions=instructions,
        subscriptions=bus,
        middleware=[attacks] if attacks.cfg.active else [],
        log_level="WARNING",
    )


def run(app: MCPServer) -> None:
    """Serve `app` over stdio until stdin closes."""

    async def main() -> None:
        # MCPServer.run_stdio_async() advertises tools.listChanged=false; the low-level run
        # lets us advertise it (handshake-era clients check it before trusting the notice).
        low = app._lowlevel_server
        options = low.create_initialization_options(NotificationOptions(tools_changed=True))
        async with stdio_server() as (read_stream, write_stream):
            await low.run(read_stream, write_stream, options)

    anyio.run(main)


def workspace() -> Path:
    """The workspace root: $MCP_WORKSPACE, else the current directory."""
    return Path(os.environ.get("MCP_WORKSPACE") or os.getcwd()).resolve()


def load_json(name: str) -> Any:
    return json.loads((DATA_DIR / name).read_text())
