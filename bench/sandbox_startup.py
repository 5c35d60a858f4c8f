"""Sandbox start-up and steady-state stdio round trip, sandboxed vs plain host subprocess.

    .venv/bin/python bench/sandbox_startup.py [--starts 10] [--calls 500] [--backend trio]

Start-up: from `open_sandbox()` (create, attach, start, resolve the cgroup) to the first MCP
round trip (an `initialize` answered by examples/servers/echo.py inside), raw JSON-RPC lines
over the sandbox streams; split into "container up" and "server answers". The same server as
a plain host subprocess, and a `cat` container (a line echoed back: Docker's own cost with no
Python start-up), alternate in the same run. Teardown (container removal) is timed too.
Steady state: one sandboxed and one host echo.py, `tools/call echo` alternating between them.
No guard, no monitor: this is the floor the guard builds on.
"""

from __future__ import annotations

import argparse
import subprocess
import time

import anyio
from _common import (
    ECHO,
    EXAMPLES,
    fmt,
    machine,
    ms,
    own_containers,
    process_client,
    sandbox_client,
    stats,
    summary,
)

from mtguard_rt.sandbox import SandboxConfig, open_sandbox

CONFIG = SandboxConfig(mounts=[EXAMPLES])
CLOSE_TIMEOUT_S = 5.0  # a host echo.py exits at stdin EOF in well under a second


async def sandbox_start(command: list[str], mcp: bool) -> tuple[float, float, float]:
    """(container up, first round trip, teardown) in ms, from entering open_sandbox."""
    t0 = time.perf_counter()
    async with open_sandbox(command, CONFIG, name="bench-start") as sb:
        t_up = time.perf_counter()
        client = sandbox_client(sb)
        if mcp:
            await client.initialize()
        else:
            await sb.stdin.send(b"ping\n")
            await client._line()
        t_rt = time.perf_counter()
    t_gone = time.perf_counter()
    return ms(t0, t_up), ms(t0, t_rt), ms(t_rt, t_gone)


class HostServer:
    """echo.py as a plain host subprocess with pipes (what an MCP host does without a guard)."""

    async def __aenter__(self) -> HostServer:
        self.proc = await anyio.open_process(ECHO, stderr=subprocess.DEVNULL)
        self.client = process_client(self.proc)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.proc.stdin.aclose()
            with anyio.move_on_after(CLOSE_TIMEOUT_S):
                await self.proc.wait()
                return
            self.proc.kill()
            await self.proc.wait()


async def host_start() -> tuple[float, float]:
    t0 = time.perf_counter()
    async with HostServer() as host:
        await host.client.initialize()
        t_rt = time.perf_counter()
    return ms(t0, t_rt), ms(t_rt, time.perf_counter())


async def main(starts: int, calls: int) -> None:
    print(f"# sandbox_startup: {machine()}")
    # Warm-up: builds the image if missing, prunes stale containers, fills the page cache.
    await sandbox_start(ECHO, mcp=True)
    await host_start()
    up, first, down, cat_up, cat_first, h_first, h_down = ([] for _ in range(7))
    for _ in range(starts):
        for out, value in zip((up, first, down), await sandbox_start(ECHO, mcp=True), strict=True):
            out.append(value)
        for out, value in zip((cat_up, cat_first), (await sandbox_start(["cat"], mcp=False))[:2],
                              strict=True):
            out.append(value)
        for out, value in zip((h_first, h_down), await host_start(), strict=True):
            out.append(value)
    print("## start-up to first round trip (ms)")
    print(f"sandbox echo.py: container up       {fmt(stats(up))}")
    print(f"sandbox echo.py: initialize answered {fmt(stats(first))}")
    print(f"sandbox echo.py: teardown (remove)  {fmt(stats(down))}")
    print(f"sandbox cat:     container up       {fmt(stats(cat_up))}")
    print(f"sandbox cat:     line echoed        {fmt(stats(cat_first))}")
    print(f"host echo.py:    initialize answered {fmt(stats(h_first))}")
    print(f"host echo.py:    exit at stdin EOF  {fmt(stats(h_down))}")

    sb_rt: list[float] = []
    host_rt: list[float] = []
    async with open_sandbox(ECHO, CONFIG, name="bench-steady") as sb, HostServer() as host:
        sbc = sandbox_client(sb)
        await sbc.initialize()
        await host.client.initialize()
        for i in range(calls + 50):
            for client, out in ((sbc, sb_rt), (host.client, host_rt)):
                t0 = time.perf_counter()
                await client.call("echo", {"text": f"hello {i}"})
                if i >= 50:  # warm-up
                    out.append(ms(t0, time.perf_counter()))
    s_sb, s_host = stats(sb_rt), stats(host_rt)
    print("## steady-state tools/call echo round trip (ms), alternating")
    print(f"sandbox: {fmt(s_sb)}")
    print(f"host:    {fmt(s_host)}")
    print(f"added by the sandbox: p50 {s_sb['p50'] - s_host['p50']:+.3f} ms  "
          f"p95 {s_sb['p95'] - s_host['p95']:+.3f} ms")
    leaked = own_containers()
    print(f"containers left: {len(leaked)}")
    summary("sandbox_startup",
            f"start->initialize sandbox p50 {stats(first)['p50']:.0f} ms vs host "
            f"{stats(h_first)['p50']:.0f} ms (cat container {stats(cat_first)['p50']:.0f} ms); "
            f"echo round trip sandbox p50 {s_sb['p50']:.3f} ms vs host {s_host['p50']:.3f} ms; "
            f"leaked containers {len(leaked)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--backend", default="trio", choices=["trio", "asyncio"])
    args = parser.parse_args()
    anyio.run(main, args.starts, args.calls, backend=args.backend)
