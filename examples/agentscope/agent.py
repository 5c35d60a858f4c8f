"""An AgentScope agent whose MCP tools go through mtguard, embedded as a library (asyncio).

Every tool of a guarded server becomes an AgentScope tool (`GuardedTool`): the agent's call
goes to `GuardedServer.call_tool`, so it is audited before dispatch, runs in the Docker
sandbox under eBPF and is verified against its behavior tree. A denial (`CallDenied`) comes
back to the agent as a `denied` tool result carrying the guard's text, so the model can reason
about it and the reasoning-acting loop goes on. The guard is the permission authority for
these tools: they answer AgentScope's permission check with ALLOW.

    .venv-agentscope/bin/python examples/agentscope/agent.py --base-url URL --model M \\
        --workspace DIR --task "..." -- python examples/servers/filesystem.py

prints one JSON object: the agent's final answer and the guard's decision on each tool call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentscope.agent import Agent, ReActConfig
from agentscope.credential import OpenAICredential
from agentscope.message import Msg, TextBlock, ToolResultState
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import ToolBase, ToolChunk, Toolkit

from mtguard_rt import CallDenied, GuardConfig, GuardedServer, open_guard
from mtguard_rt.between_calls import is_between
from mtguard_rt.sandbox import SandboxConfig

SYSTEM_PROMPT = (
    "You are a careful assistant. Use the tools to do the user's task. A tool result that "
    "starts with 'mtguard denied' means a security guard refused the call: do not retry it."
)
MAX_ITERS = 6  # reasoning-acting rounds per reply
# agentscope turns DeprecationWarnings on ("once"); bcc's own, on loading the monitor, are noise
warnings.filterwarnings("ignore", category=DeprecationWarning, module="bcc")


class GuardedTool(ToolBase):
    """One MCP tool of a guarded server, as an AgentScope tool."""

    def __init__(self, server: GuardedServer, tool: dict[str, Any], task: str) -> None:
        super().__init__()
        self.server = server
        self.task = task
        self.name = tool["name"]
        self.description = tool.get("description") or tool["name"]
        schema = dict(tool.get("inputSchema") or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.input_schema = schema
        annotations = tool.get("annotations") or {}
        self.is_read_only = bool(annotations.get("readOnlyHint", False))
        self.is_concurrency_safe = False  # the guard runs one call per server at a time

    async def check_permissions(self, *_args: Any, **_kwargs: Any) -> PermissionDecision:
        return PermissionDecision(
            behavior=PermissionBehavior.ALLOW,
            message="mtguard audits, traces and verifies every call of this tool",
        )

    async def call(self, **kwargs: Any) -> ToolChunk:
        try:
            result = await self.server.call_tool(self.name, kwargs, task=self.task)
        except CallDenied as denied:
            reasons = "; ".join(v.reason for v in denied.verdict.denying)
            text = f"{denied}. {reasons}".strip()
            return ToolChunk(content=[TextBlock(text=text)], state=ToolResultState.DENIED)
        texts = [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]
        if not texts and result.get("structuredContent") is not None:
            texts = [json.dumps(result["structuredContent"])]
        state = ToolResultState.ERROR if result.get("isError") else ToolResultState.RUNNING
        return ToolChunk(content=[TextBlock(text="\n".join(texts))], state=state)


async def run_agent(
    task: str,
    server_cmd: Sequence[str],
    *,
    base_url: str,
    model: str,
    api_key: str = "unused",
    config: GuardConfig | None = None,
) -> dict[str, Any]:
    """Run one agent reply on `task` with the server's tools behind the guard."""
    config = config or GuardConfig()
    async with open_guard(config) as guard:
        async with guard.connect(list(server_cmd)) as server:
            tools = [GuardedTool(server, t, task) for t in await server.list_tools()]
            agent = Agent(
                name="assistant",
                system_prompt=SYSTEM_PROMPT,
                model=OpenAIChatModel(
                    credential=OpenAICredential(api_key=api_key, base_url=base_url),
                    model=model,
                    stream=False,
                    max_retries=0,
                ),
                toolkit=Toolkit(tools=tools),
                react_config=ReActConfig(max_iters=MAX_ITERS),
            )
            reply = await agent.reply(
                Msg(name="user", role="user", content=[TextBlock(text=task)])
            )
        calls = [
            {"tool": r.tool, "arguments": r.arguments, "decision": r.decision,
             "phase": r.phase, "rules": r.rules}
            for r in guard.records
            if not is_between(r)  # the server's start-up and between-call records aside
        ]
    return {"answer": reply.get_text_content() or "", "calls": calls}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint (…/v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--task", required=True, help="the user's request")
    parser.add_argument("--workspace", help="host directory the server may write")
    parser.add_argument("--mount", action="append", default=[], help="read-only host path")
    parser.add_argument("--network", choices=["none", "host"], default="none")
    parser.add_argument("--audit-log", default=".mtguard/agentscope-audit.jsonl")
    parser.add_argument("server", nargs="+", help="the MCP server command (after --)")
    args = parser.parse_args(argv)
    here = str(Path(__file__).resolve().parents[1] / "servers")
    env = {"MCP_WORKSPACE": args.workspace} if args.workspace else {}
    config = GuardConfig(
        task=args.task,
        audit_log=args.audit_log,
        telemetry={"exporter": "off"},
        sandbox=SandboxConfig(network=args.network, workspace=args.workspace,
                              mounts=[here, *args.mount], env=env),
    )
    outcome = asyncio.run(run_agent(
        args.task, args.server, base_url=args.base_url, model=args.model,
        api_key=os.environ.get(args.api_key_env, "unused"), config=config,
    ))
    json.dump(outcome, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
