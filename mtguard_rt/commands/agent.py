"""`mtguard agent run|status|stop|install-unit`: the host's one BPF monitor, shared by
every guard.

`run` serves in the foreground until `stop` (or SIGINT/SIGTERM); `status` prints the
agent's figures as JSON (exit 1 when none answers); `stop` asks it to exit; `install-unit`
writes the systemd unit (agent/unit.py) to /etc/systemd/system, or prints it (`--print`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("agent", help="run, query or stop the host's shared monitor agent")
    p.add_argument("action", choices=["run", "status", "stop", "install-unit"])
    p.add_argument("--socket", help="unix socket (default $MTGUARD_AGENT_SOCKET, else "
                   "/run/mtguard/agent.sock as root)")  # fmt: skip
    p.add_argument("--ring-pages", type=int, default=4096, help="ring buffer pages (run)")
    p.add_argument("--metrics", metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (run; default: "
                   "off; e.g. 127.0.0.1:9464, keep it on loopback)")  # fmt: skip
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)  # run: agent/spawn.py
    p.add_argument("--print", action="store_true", dest="print_unit",
                   help="install-unit: print the unit instead of writing it")  # fmt: skip
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..agent.protocol import agent_socket_path

    path = Path(args.socket) if args.socket else agent_socket_path()
    if args.action == "install-unit":
        from ..agent.unit import install_unit

        return install_unit(path, print_only=args.print_unit)
    if args.action == "run":
        metrics = None
        if args.metrics:
            from ..agent.metrics import parse_address

            try:
                metrics = parse_address(args.metrics)
            except ValueError as exc:
                print(f"mtguard: {exc}", file=sys.stderr)
                return 2
        return _run(path, args.ring_pages, metrics, args.ready_fd)
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


def _run(path: Any, ring_pages: int, metrics: tuple[str, int] | None, ready_fd: int | None) -> int:
    import signal
    from functools import partial

    import anyio

    from ..agent.server import Agent, serve_agent

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def until_signal(agent: Agent) -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        agent.stop.set()
                        return

            agent: Agent = await tg.start(partial(serve_agent, path, ring_pages, metrics=metrics))
            load_ms = agent.program.load_s * 1000
            where = ""
            if metrics is not None:
                host = f"[{metrics[0]}]" if ":" in metrics[0] else metrics[0]
                where = f", metrics at http://{host}:{agent.metrics_port}/metrics"
            print(f"mtguard: agent (pid {agent.status()['pid']}) serving at {path}, "
                  f"program loaded in {load_ms:.0f} ms{where}", flush=True)  # fmt: skip
            from ..agent.spawn import announce_ready

            announce_ready(ready_fd)
            tg.start_soon(until_signal, agent)
            await agent.stop.wait()
            tg.cancel_scope.cancel()

    anyio.run(main, backend="trio")
    return 0
