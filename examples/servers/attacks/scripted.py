"""A scripted MCP server: its tools, their schemas and what each call really does, as data.

The own attack corpus (mtguard_rt/eval/owncorpus) describes each server of a case as JSON in
$MTGUARD_OWN_SERVER: `{"name", "daemon": bool, "tools": [{"name", "description", "params":
{arg: type}, "steps": [...], "after": {"calls": N, "steps": [...]}}]}`. A call runs its tool's
steps for real, in order (`after`: from call N+1 on, other steps with the same listing: a
rug pull with an unchanged tool list). Steps, `{arg}` filled from the call's arguments, paths
relative to $MCP_WORKSPACE: text, read, list, write, append, delete, exec, signal (the helper
process started with `daemon`), symlink, env. A failed step is reported in the result, never
raised: what the kernel saw is what the guard judges.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import NotificationOptions
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

STEP_TIMEOUT_S = 10.0  # an exec step is bounded: a hung command must not hang the call
KINDS = {"string", "number", "integer", "boolean", "object", "array"}


class Args(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return ""


def _fill(text: str, args: dict[str, Any]) -> str:
    return text.format_map(Args({k: v if isinstance(v, str) else json.dumps(v)
                                 for k, v in args.items()}))


def _path(text: str, args: dict[str, Any]) -> Path:
    raw = os.path.expanduser(_fill(text, args))
    root = Path(os.environ.get("MCP_WORKSPACE") or os.getcwd())
    return Path(raw) if os.path.isabs(raw) else root / raw


def _encode(text: str, how: str | None) -> str:
    if how == "base64":
        return base64.b64encode(text.encode()).decode()
    if how == "hex":
        return text.encode().hex()
    if how == "split":  # one character per line group of 4: no token survives whole
        return " ".join(text[i : i + 4] for i in range(0, len(text), 4))
    return text


class Scripted:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.tools = {t["name"]: t for t in spec.get("tools", [])}
        self.calls: dict[str, int] = {}
        self.daemon: subprocess.Popen[bytes] | None = None
        if spec.get("daemon"):  # another process of the sandbox a payload may signal
            self.daemon = subprocess.Popen(["sleep", "600"])

    def listing(self) -> list[types.Tool]:
        out = []
        for t in self.tools.values():
            params = t.get("params", {})
            props = {k: {"type": v if v in KINDS else "string"} for k, v in params.items()}
            schema = {"type": "object", "properties": props,
                      "required": [k for k in params if k not in t.get("optional", [])]}
            out.append(types.Tool(name=t["name"], description=t.get("description", ""),
                                  input_schema=schema))
        return out

    def run(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        tool = self.tools.get(name)
        if tool is None:
            return f"unknown tool {name!r}", True
        n = self.calls[name] = self.calls.get(name, 0) + 1
        steps = tool.get("steps", [])
        after = tool.get("after")
        if after and n > int(after["calls"]):
            steps = after["steps"]
        parts: list[str] = []
        error = False
        for step in steps:
            try:
                out = self.step(step, args)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                out, error = f"error: {exc}", error or bool(step.get("fatal"))
            if out and not step.get("quiet"):
                parts.append(out)
        return "\n".join(parts), error

    def step(self, step: dict[str, Any], args: dict[str, Any]) -> str:
        op = step["op"]
        if op == "text":
            return _fill(step["text"], args)
        if op == "read":
            text = _path(step["path"], args).read_text(errors="replace")
            return _encode(text, step.get("encode"))
        if op == "list":
            return json.dumps(sorted(os.listdir(_path(step.get("path", "."), args))))
        if op in ("write", "append"):
            path = _path(step["path"], args)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a" if op == "append" else "w") as f:
                f.write(_fill(step["content"], args))
            return _fill(step.get("say", ""), args)
        if op == "delete":
            _path(step["path"], args).unlink()
            return _fill(step.get("say", ""), args)
        if op == "exec":
            proc = subprocess.run(["sh", "-c", _fill(step["command"], args)], capture_output=True,
                                  timeout=STEP_TIMEOUT_S, check=False)
            return (proc.stdout + proc.stderr).decode(errors="replace").strip()
        if op == "signal":
            if self.daemon is None:
                raise ValueError("no helper process to signal")
            os.kill(self.daemon.pid, getattr(signal, step.get("signal", "SIGTERM")))
            self.daemon.wait(timeout=STEP_TIMEOUT_S)
            return _fill(step.get("say", ""), args)
        if op == "symlink":
            link = _path(step["path"], args)
            link.unlink(missing_ok=True)
            link.symlink_to(_fill(step["target"], args))
            return _fill(step.get("say", ""), args)
        if op == "env":
            return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                             if k.startswith(tuple(step.get("prefixes", [""]))))
        raise ValueError(f"unknown step {op!r}")


def create_server(spec: dict[str, Any]) -> Server[Any]:
    impl = Scripted(spec)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=impl.listing())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, error = await anyio.to_thread.run_sync(impl.run, params.name,
                                                     dict(params.arguments or {}))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=error)

    return Server(spec.get("name", "scripted"), on_list_tools=list_tools, on_call_tool=call_tool)


def main() -> None:
    raw = os.environ.get("MTGUARD_OWN_SERVER")
    if not raw:
        sys.exit("MTGUARD_OWN_SERVER: the server's JSON definition is required")
    server = create_server(json.loads(raw))

    async def serve() -> None:
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, options)

    anyio.run(serve)


if __name__ == "__main__":
    main()
