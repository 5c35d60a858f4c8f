"""A PydanticAI agent whose MCP toolset is `mtguard proxy -- SERVER` (stdio).

PydanticAI's `MCPToolset` (over a FastMCP stdio transport) starts the proxy; the proxy runs
SERVER in the Docker sandbox, audits each call before dispatch, traces it with eBPF and
verifies it after. A denied call comes back as an MCP tool result with `isError`; with
`tool_error_behavior="failed"` PydanticAI hands the guard's text to the model as a failed tool
result (no "fix it and retry" prompt: a denial is final).

    .venv-fw-pydantic-ai/bin/python examples/frameworks/pydantic_ai_agent.py \\
        --base-url URL --model M --task "..." --workspace DIR -- python server.py

prints one JSON object, {"answer": ...}. Tested in tests/examples/test_frameworks.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

INSTRUCTIONS = (
    "Use the tools to do the user's task. A tool result that starts with 'mtguard denied' "
    "means a security guard refused the call: do not retry it."
)


def proxy_args(args: argparse.Namespace) -> list[str]:
    """`mtguard proxy` flags for this run, then `--` and the server command."""
    flags = ["proxy", "--task", args.task, "--audit-log", args.audit_log]
    if args.workspace:
        flags += ["--workspace", args.workspace, "--env", f"MCP_WORKSPACE={args.workspace}"]
    for mount in args.mount:
        flags += ["--mount", mount]
    return [*flags, "--", *args.server]


async def run(args: argparse.Namespace) -> str:
    toolset = MCPToolset(
        StdioTransport(command=args.mtguard, args=proxy_args(args)),
        tool_error_behavior="failed",
        # the default (5 s) is shorter than the proxy's start: sandbox, eBPF monitor, server
        init_timeout=120,
    )
    model = OpenAIChatModel(args.model, provider=OpenAIProvider(
        base_url=args.base_url, api_key=os.environ.get(args.api_key_env, "unused")))
    agent = Agent(model, instructions=INSTRUCTIONS, toolsets=[toolset])
    async with agent:  # one proxy (one sandbox) for the whole run
        result = await agent.run(args.task)
    return str(result.output)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint (…/v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--task", required=True, help="the user's request")
    parser.add_argument("--workspace", help="host directory the server may write")
    parser.add_argument("--mount", action="append", default=[], help="read-only host path")
    parser.add_argument("--audit-log", default=".mtguard/pydantic-ai-audit.jsonl")
    parser.add_argument("--mtguard", default=shutil.which("mtguard") or str(
        Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mtguard"))
    parser.add_argument("server", nargs="+", help="the MCP server command (after --)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps({"answer": asyncio.run(run(parse()))}))
