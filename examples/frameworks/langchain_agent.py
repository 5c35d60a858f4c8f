"""A LangChain tool-calling loop whose MCP tools come from `mtguard proxy -- SERVER` (stdio).

`langchain-mcp-adapters` starts the proxy as an MCP stdio server and turns its tools into
LangChain tools; the proxy runs SERVER in the Docker sandbox, audits each call before dispatch,
traces it with eBPF and verifies it after. A denied call comes back as an MCP tool result with
`isError`: the adapter (`handle_tool_errors=True`, its default) makes it a `ToolMessage` with
`status="error"` and the guard's text, which goes back to the model. The loop is the minimal
one (`bind_tools`, run the calls, repeat); `create_agent` of the `langchain` package (not
installed here) takes the same tools.

    .venv-fw-langchain/bin/python examples/frameworks/langchain_agent.py \\
        --base-url URL --model M --task "..." --workspace DIR -- python server.py

prints one JSON object, {"answer": ..., "tool_status": [...]}. Tested in
tests/examples/test_frameworks.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

INSTRUCTIONS = (
    "Use the tools to do the user's task. A tool result that starts with 'mtguard denied' "
    "means a security guard refused the call: do not retry it."
)
MAX_TURNS = 6


def proxy_args(args: argparse.Namespace) -> list[str]:
    """`mtguard proxy` flags for this run, then `--` and the server command."""
    flags = ["proxy", "--task", args.task, "--audit-log", args.audit_log]
    if args.workspace:
        flags += ["--workspace", args.workspace, "--env", f"MCP_WORKSPACE={args.workspace}"]
    for mount in args.mount:
        flags += ["--mount", mount]
    return [*flags, "--", *args.server]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    client = MultiServerMCPClient(
        {"guarded": {"transport": "stdio", "command": args.mtguard, "args": proxy_args(args)}})
    # one session for the whole run: `client.get_tools()` would start a proxy (a sandbox) per call
    async with client.session("guarded") as session:
        tools = {t.name: t for t in await load_mcp_tools(session)}
        llm = ChatOpenAI(model=args.model, base_url=args.base_url, use_responses_api=False,
                         api_key=SecretStr(os.environ.get(args.api_key_env, "unused")),
                         max_retries=0).bind_tools(list(tools.values()))
        messages: list[BaseMessage] = [SystemMessage(INSTRUCTIONS), HumanMessage(args.task)]
        status: list[str] = []
        for _ in range(MAX_TURNS):
            reply = await llm.ainvoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                return {"answer": reply.text, "tool_status": status}
            for call in reply.tool_calls:
                result: ToolMessage = await tools[call["name"]].ainvoke(call)
                status.append(result.status)
                messages.append(result)
    return {"answer": "(no final answer within the turn budget)", "tool_status": status}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint (…/v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--task", required=True, help="the user's request")
    parser.add_argument("--workspace", help="host directory the server may write")
    parser.add_argument("--mount", action="append", default=[], help="read-only host path")
    parser.add_argument("--audit-log", default=".mtguard/langchain-audit.jsonl")
    parser.add_argument("--mtguard", default=shutil.which("mtguard") or str(
        Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mtguard"))
    parser.add_argument("server", nargs="+", help="the MCP server command (after --)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(parse()))))
