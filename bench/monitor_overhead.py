"""Monitor overhead per call: a no-op tool call, traced vs untraced, same container, one run.

    sudo .venv/bin/python bench/monitor_overhead.py [--calls 300]

A long-lived echo server runs in the sandbox (the shape of an MCP server handling a no-op
tool: one request line in, one response line out, no side effects). Calls alternate
untraced (no watch on the cgroup) and traced (watch + window: subscribe, seed from /proc,
forward, response, drain and settle). Reports median/p95 latency of both, the added
median, and the settle time (window exit after the response). Also prints the BPF
compile-and-load time of a fresh process.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import anyio

from mtguard_rt.model import DeclaredCall
from mtguard_rt.monitor import MonitorConfig, open_monitor
from mtguard_rt.sandbox import SandboxConfig, open_sandbox

SERVER = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"
CALL = DeclaredCall(call_id="bench", server="echo", tool="noop", arguments={})


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def main(calls: int) -> None:
    untraced: list[float] = []
    traced: list[float] = []
    settle: list[float] = []
    events: list[int] = []
    async with open_monitor(MonitorConfig()) as mon:
        async with open_sandbox([sys.executable, "-c", SERVER], SandboxConfig(), gated=True) as sb:
            await sb.release()

            async def call() -> None:
                await sb.stdin.send(b'{"method":"tools/call"}\n')
                with anyio.fail_after(10):
                    await sb.stdout.receive()

            for _ in range(20):  # warm up the server and the page cache
                await call()
            async with mon.watch(sb.cgroup_id, sb.cgroup_path) as watch:
                async with watch.window(CALL) as w:
                    await call()
                    w.response_arrived()
            for _ in range(calls):
                t0 = time.perf_counter()
                await call()
                untraced.append(time.perf_counter() - t0)
                async with mon.watch(sb.cgroup_id, sb.cgroup_path) as watch:
                    t0 = time.perf_counter()
                    async with watch.window(CALL) as window:
                        await call()
                        window.response_arrived()
                        t1 = time.perf_counter()
                    t2 = time.perf_counter()
                traced.append(t2 - t0)
                settle.append(t2 - t1)
                events.append(window.events_seen)
    ms = 1000.0
    um, tm = statistics.median(untraced) * ms, statistics.median(traced) * ms
    print(f"calls={calls} (alternating, same container)")
    print(f"untraced: median {um:.3f} ms, p95 {pct(untraced, 0.95) * ms:.3f} ms")
    print(f"traced:   median {tm:.3f} ms, p95 {pct(traced, 0.95) * ms:.3f} ms")
    print(f"added at the median: {tm - um:.3f} ms")
    print(f"settle (window exit after response): median {statistics.median(settle) * ms:.3f} ms, "
          f"p95 {pct(settle, 0.95) * ms:.3f} ms")  # fmt: skip
    print(f"events per traced call: median {statistics.median(events)}")


def load_time() -> None:
    code = (
        "import time; t = time.monotonic()\n"
        "from mtguard_rt.monitor.loader import load_program\n"
        "p = load_program(4096)\n"
        "print(round(p.load_s * 1000), round((time.monotonic() - t) * 1000))"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(3)]  # fmt: skip
    print("BPF compile+load (ms, 3 fresh processes): " + ", ".join(r[0] for r in runs)
          + "; including imports: " + ", ".join(r[1] for r in runs))  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    anyio.run(main, a.calls)
    load_time()
