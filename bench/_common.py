"""Helpers the issue-2/4 benchmarks share: percentiles, a raw JSON-RPC line client, RSS, fds.

A `LineClient` speaks newline-delimited JSON-RPC over any pair of byte streams (the sandbox's
`stdin`/`stdout`, or a host subprocess's pipes), so the sandboxed and the plain server are
measured with the same client code. Every wait is bounded by `TIMEOUT_S`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
ECHO = [sys.executable, str(ROOT / "examples" / "servers" / "echo.py")]
EXAMPLES = str(ROOT / "examples")
TIMEOUT_S = 60.0  # one request; a Python server's first import storm on a loaded machine
PROTOCOL_VERSION = "2025-11-25"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50": statistics.median(xs), "p95": pct(xs, 0.95),
            "min": min(xs), "max": max(xs)}


def fmt(s: dict[str, float], unit: str = "ms") -> str:
    return f"p50 {s['p50']:.3f} {unit}  p95 {s['p95']:.3f} {unit}  (n={int(s['n'])})"


def ms(t0: float, t1: float) -> float:
    return (t1 - t0) * 1000.0


class LineClient:
    """JSON-RPC requests over newline-delimited byte streams; one request in flight."""

    def __init__(self, send: Any, receive: Any) -> None:
        self._send = send        # async (bytes) -> None
        self._receive = receive  # async () -> bytes (a chunk; b"" or an exception at EOF)
        self._buf = b""
        self._next_id = 0

    async def _line(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = await self._receive()
            if not chunk:
                raise EOFError("server closed stdout")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self._send(json.dumps(msg).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        await self._send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                     "params": params}).encode() + b"\n")
        with anyio.fail_after(TIMEOUT_S):
            while True:
                msg = json.loads(await self._line())
                if msg.get("id") == rid:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return dict(msg["result"])

    async def initialize(self) -> dict[str, Any]:
        result = await self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "mtguard-bench", "version": "0"}})
        await self.notify("notifications/initialized")
        return result

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"tools/call {tool}: {result}")
        return result


def sandbox_client(sb: Any) -> LineClient:
    return LineClient(sb.stdin.send, sb.stdout.receive)


def process_client(proc: Any) -> LineClient:
    async def receive() -> bytes:
        try:
            return bytes(await proc.stdout.receive())
        except anyio.EndOfStream:
            return b""

    return LineClient(proc.stdin.send, receive)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def own_containers() -> list[str]:
    """Names of containers (running or not) this process's guard made. Docker CLI, off the
    measured path, only to check for leaks; other guards on the machine are not counted."""
    from mtguard_rt.sandbox.lifecycle import OWNER_LABEL, owner_token

    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={OWNER_LABEL}={owner_token()}",
                          "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def machine() -> str:
    load = os.getloadavg()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, "
            f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {when}")


def summary(name: str, text: str) -> None:
    """A line `python -m bench` collects into its summary."""
    print(f"SUMMARY {name}: {text}", flush=True)
