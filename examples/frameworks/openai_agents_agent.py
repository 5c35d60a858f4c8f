"""An OpenAI Agents SDK agent whose MCP server is `mtguard proxy -- SERVER` (stdio).

The SDK starts the proxy as its MCP stdio server; the proxy runs SERVER in the Docker sandbox,
audits each call before dispatch, traces it with eBPF and verifies it after. A denied call
comes back as an MCP tool result with `isError` and the guard's text, which the SDK hands to
the model as the tool's output.

    .venv-fw-openai-agents/bin/python examples/frameworks/openai_agents_agent.py \\
        --base-url URL --model M --task "..." --workspace DIR -- python server.py

prints one JSON object, {"answer": ...}. Tested in tests/examples/test_frameworks.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI

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
    set_tracing_disabled(True)  # the SDK's traces go to OpenAI by default; the guard has its own
    client = AsyncOpenAI(base_url=args.base_url, api_key=os.environ.get(args.api_key_env, "unused"))
    async with MCPServerStdio(
        name="guarded",
        params={"command": args.mtguard, "args": proxy_args(args)},
        cache_tools_list=True,
        # the default (5 s) is shorter than a guarded call: sandbox start, tracing, verification
        client_session_timeout_seconds=120,
    ) as server:
        agent = Agent(
            name="assistant",
            instructions=INSTRUCTIONS,
            model=OpenAIChatCompletionsModel(model=args.model, openai_client=client),
            mcp_servers=[server],
        )
        result = await Runner.run(agent, args.task, max_turns=6)
    return str(result.final_output)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint (…/v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--task", required=True, help="the user's request")
    parser.add_argument("--workspace", help="host directory the server may write")
    parser.add_argument("--mount", action="append", default=[], help="read-only host path")
    parser.add_argument("--audit-log", default=".mtguard/openai-agents-audit.jsonl")
    parser.add_argument("--mtguard", default=shutil.which("mtguard") or str(
        Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mtguard"))
    parser.add_argument("server", nargs="+", help="the MCP server command (after --)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    answer = asyncio.run(run(parse()))
    print(json.dumps({"answer": answer}))
    sys.exit(0)
