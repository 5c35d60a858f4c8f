"""System-wide cost of a loaded monitor on processes it does not watch.

    .venv/bin/python bench/bpf_tax.py [--rounds 3] [--calls 200]
    .venv/bin/python bench/bpf_tax.py --fleet 10 [--inproc K] [--pairs 200000]

The monitor's tracepoint programs run on every matching syscall on the host and filter by
cgroup in the kernel, so a guard taxes unwatched work too (the docker daemon relaying a
sandbox's stdio, other services). One sandboxed echo.py answers raw `tools/call echo` lines
(no guard) in alternating blocks: with no BPF loaded, and while a separate process holds
the monitor loaded (`open_monitor`, nothing watched). The process is started and stopped per
block, as the module stays loaded for a process's life. Same container, one run.

`--fleet N` (issue 14): the unwatched 64 B pipe write()+read() pair in this process with no
BPF, then with `mtguard agent` serving 1 guarded server, N at once, 1 again, then no BPF
again (the agent stopped); the BPF programs each process holds are counted at each step (the
agent's only: the proxies load none). `--inproc K` adds today's way for comparison: K
processes each holding its own loaded monitor (K compiles at once).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _agent import bpf_prog_fds, proxies, running_agent
from _common import ECHO, EXAMPLES, fmt, machine, ms, own_containers, sandbox_client, stats, summary
from stdio_integrity import tax

from mtguard_rt.sandbox import SandboxConfig, open_sandbox

HOLDER = """
import sys, anyio
from mtguard_rt.monitor import MonitorConfig, open_monitor
async def main():
    async with open_monitor(MonitorConfig()):
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the bench closes our stdin
anyio.run(main, backend="trio")
"""
LOAD_TIMEOUT_S = 120  # BPF compile and load: 1-5 s measured, more on a loaded machine
WARMUP = 20


async def block(client: object, n: int, start: int) -> list[float]:
    out = []
    for i in range(n + WARMUP):
        t0 = time.perf_counter()
        await client.call("echo", {"text": f"tax {start + i}"})  # type: ignore[attr-defined]
        if i >= WARMUP:
            out.append(ms(t0, time.perf_counter()))
    return out


async def main(rounds: int, calls: int) -> None:
    print(f"# bpf_tax: {machine()}")
    off: list[float] = []
    on: list[float] = []
    per_round = []
    async with open_sandbox(ECHO, SandboxConfig(mounts=[EXAMPLES]), name="bench-tax") as sb:
        client = sandbox_client(sb)
        await client.initialize()
        for r in range(rounds):
            a = await block(client, calls, 2 * r * (calls + WARMUP))
            proc = await anyio.open_process([sys.executable, "-c", HOLDER], stderr=subprocess.PIPE)
            try:
                with anyio.fail_after(LOAD_TIMEOUT_S):
                    line = await proc.stdout.receive()  # type: ignore[union-attr]
                if b"ready" not in line:
                    raise RuntimeError(f"monitor holder: {line!r}")
                b = await block(client, calls, (2 * r + 1) * (calls + WARMUP))
            finally:
                with anyio.CancelScope(shield=True):
                    await proc.stdin.aclose()  # type: ignore[union-attr]
                    with anyio.move_on_after(30):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
            off += a
            on += b
            per_round.append(statistics.median(b) - statistics.median(a))
            print(f"round {r + 1}: no BPF p50 {statistics.median(a):.3f} ms, "
                  f"BPF loaded p50 {statistics.median(b):.3f} ms")
    s_off, s_on = stats(off), stats(on)
    print(f"no BPF:     {fmt(s_off)}")
    print(f"BPF loaded: {fmt(s_on)}")
    # The median of the per-round differences: a burst of load on the shared machine during
    # one block skews that round only.
    added = statistics.median(per_round)
    print(f"added: pooled p50 {s_on['p50'] - s_off['p50']:+.3f} ms, median of rounds "
          f"{added:+.3f} ms (per round: {', '.join(f'{d:+.3f}' for d in per_round)})")
    left = own_containers()
    summary("bpf_tax", f"unwatched sandbox echo round trip p50 {s_off['p50']:.3f} ms without "
            f"BPF, {s_on['p50']:.3f} ms with the monitor loaded (median of per-round "
            f"differences {added:+.3f} ms); containers left {len(left)}")


async def fleet(n: int, rounds: int, pairs: int, inproc: int) -> None:
    from mtguard_rt.agent.client import connect_agent

    print(f"# bpf_tax --fleet {n}: {machine()}")
    rows: list[tuple[str, float, str]] = [("no BPF", tax(pairs, rounds), "")]
    with tempfile.TemporaryDirectory(prefix="mtguard-fleet-") as tmp:
        sock = Path(tmp) / "run" / "agent.sock"
        env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}

        def programs(procs: list[Any], agent_pid: int) -> str:
            status = connect_agent(sock)
            try:
                st = status.status()
            finally:
                status.close()
            held = sum(bpf_prog_fds(p.pid) for p in procs)
            return (f"agent: {st['programs']} program, {bpf_prog_fds(agent_pid)} prog fds, "
                    f"{st['watched_cgroups']} sandboxes watched; proxies' prog fds: {held}")

        async with running_agent(sock) as (agent, line):
            print(line)
            rows.append(("agent, 0 servers", tax(pairs, rounds), programs([], agent.pid)))
            for k, tag in ((1, "one-a"), (n, "many"), (1, "one-b")):
                t0 = time.perf_counter()
                async with proxies(k, env, Path(tmp), tag) as procs:
                    up = ms(t0, time.perf_counter())
                    print(f"{k} proxies up in {up:.0f} ms", flush=True)
                    rows.append((f"agent, {k} servers", tax(pairs, rounds),
                                 programs(procs, agent.pid)))  # fmt: skip
                for i in range(k):  # the mode line: none of them compiled its own
                    said = (Path(tmp) / f"{tag}-{i}.err").read_text()
                    if "monitor: agent" not in said:
                        raise RuntimeError(f"proxy {tag}-{i} not in agent mode: {said!r}")
        rows.append(("no BPF (after)", tax(pairs, rounds), ""))
        if inproc:
            holders = [await anyio.open_process([sys.executable, "-c", HOLDER],
                                                stderr=subprocess.DEVNULL)
                       for _ in range(inproc)]  # fmt: skip
            try:
                with anyio.fail_after(LOAD_TIMEOUT_S * max(1, inproc // 2)):
                    for h in holders:
                        if b"ready" not in await h.stdout.receive():
                            raise RuntimeError("a monitor holder did not load")
                held = sum(bpf_prog_fds(h.pid) for h in holders)
                rows.append((f"in-process, {inproc} monitors", tax(pairs, rounds),
                             f"prog fds held: {held}"))  # fmt: skip
            finally:
                with anyio.CancelScope(shield=True):
                    for h in holders:
                        await h.stdin.aclose()
                        with anyio.move_on_after(30):
                            await h.wait()
                        if h.returncode is None:
                            h.kill()
                            await h.wait()
    base = statistics.mean([rows[0][1], rows[-1 if not inproc else -2][1]])
    for name, ns, note in rows:
        print(f"{name:<26} {ns:8.0f} ns/pair  tax {ns - base:+7.0f} ns  {note}")
    one = statistics.mean([ns for name, ns, _ in rows if name == "agent, 1 servers"])
    many = next(ns for name, ns, _ in rows if name == f"agent, {n} servers")
    summary("bpf_tax_fleet", f"unwatched 64 B pipe pair tax with the agent: 1 server "
            f"{one - base:+.0f} ns, {n} servers {many - base:+.0f} ns (no BPF {base:.0f} ns)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--backend", default="trio", choices=["trio", "asyncio"])
    parser.add_argument("--fleet", type=int, default=0, help="N servers through the agent")
    parser.add_argument("--inproc", type=int, default=0, help="--fleet: K in-process monitors")
    parser.add_argument("--pairs", type=int, default=200_000, help="--fleet: pipe pairs")
    args = parser.parse_args()
    if args.fleet:
        anyio.run(fleet, args.fleet, args.rounds, args.pairs, args.inproc, backend="trio")
    else:
        anyio.run(main, args.rounds, args.calls, backend=args.backend)
