"""`mtguard agent run|status|stop`: the host's one BPF monitor, shared by every guard.

`run` serves in the foreground until `stop` (or SIGINT/SIGTERM); `status` prints the
agent's figures as JSON (exit 1 when none answers); `stop` asks it to exit.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("agent", help="run, query or stop the host's shared monitor agent")
    p.add_argument("action", choices=["run", "status", "stop"])
    p.add_argument("--socket", help="unix socket (default $MTGUARD_AGENT_SOCKET, else "
                   "/run/mtguard/agent.sock as root)")  # fmt: skip
    p.add_argument("--ring-pages", type=int, default=4096, help="ring buffer pages (run)")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..agent.protocol import agent_socket_path

    path = Path(args.socket) if args.socket else agent_socket_path()
    if args.action == "run":
        return _run(path, args.ring_pages)
    from ..agent.client import AgentUnavailable, connect_agent
    from ..agent.protocol import Request
    from ..errors import MonitorLost

    try:
        program = connect_agent(path)
    except AgentUnavailable as exc:
        print(f"mtguard: {exc}", file=sys.stderr)
        return 1
    try:
        if args.action == "status":
            print(json.dumps(program.status(), indent=2, sort_keys=True))
        else:
            try:
                program.call(Request(op="stop"))
            except MonitorLost:
                pass  # it closed before its reply went out: stopped all the same
            print(f"mtguard: agent (pid {program.agent_pid}) stopping")
    finally:
        program.close()
    return 0


def _run(path: Any, ring_pages: int) -> int:
    import signal

    import anyio

    from ..agent.server import Agent, serve_agent

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def until_signal(agent: Agent) -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        agent.stop.set()
                        return

            agent: Agent = await tg.start(serve_agent, path, ring_pages)
            load_ms = agent.program.load_s * 1000
            print(f"mtguard: agent (pid {agent.status()['pid']}) serving at {path}, "
                  f"program loaded in {load_ms:.0f} ms", flush=True)  # fmt: skip
            tg.start_soon(until_signal, agent)
            await agent.stop.wait()
            tg.cancel_scope.cancel()

    anyio.run(main, backend="trio")
    return 0
