"""System-wide cost of a loaded monitor on processes it does not watch.

    .venv/bin/python bench/bpf_tax.py [--rounds 3] [--calls 200]

The monitor's tracepoint programs run on every matching syscall on the host and filter by
cgroup in the kernel, so a guard taxes unwatched work too (the docker daemon relaying a
sandbox's stdio, other services). One sandboxed echo.py answers raw `tools/call echo` lines
(no guard) in alternating blocks: with no BPF loaded, and while a separate process holds
the monitor loaded (`open_monitor`, nothing watched). The process is started and stopped per
block, as the module stays loaded for a process's life. Same container, one run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import anyio
from _common import ECHO, EXAMPLES, fmt, machine, ms, own_containers, sandbox_client, stats, summary

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--backend", default="trio", choices=["trio", "asyncio"])
    args = parser.parse_args()
    anyio.run(main, args.rounds, args.calls, backend=args.backend)
