"""Monitor throughput: a file-open storm in a watched cgroup, at the default ring size.

    sudo .venv/bin/python bench/monitor_throughput.py [--sizes 50000,100000,...] [--ring-pages N]

For each storm size (opens; each open+close is two kernel events) it reports the events
the window saw, the kernel drops, the rate the guard absorbed them (events / window time)
and the guard's CPU seconds (user+sys of this process) during the window. Loss starts at
the first size whose drops are non-zero. Runs the storm as a C-speed loop in Python's
os.open/os.close (no I/O), gated in a fresh cgroup so only it is traced.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "monitor"))

from monitor_harness import CALL, gated_cgroup

from mtguard_rt.monitor import MonitorConfig, open_monitor

STORM = (
    "import os, sys\n"
    "o, c = os.open, os.close\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    c(o('/dev/null', os.O_RDONLY))\n"
)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def storm(size: int, ring_pages: int) -> dict[str, float | int | bool]:
    config = MonitorConfig(settle_max_ms=5000, ring_pages=ring_pages, max_events_per_window=10**8)
    async with open_monitor(config) as mon, gated_cgroup() as cg:
        cmd = [sys.executable, "-c", STORM, str(size)]
        async with cg.run(cmd) as proc, mon.watch(cg.id, str(cg.path)) as watch:
            cpu0, t0 = cpu_s(), time.monotonic()
            async with watch.window(CALL) as window:
                await cg.release(proc)
                with anyio.fail_after(600):
                    await proc.wait()
                window.response_arrived()
            elapsed, cpu = time.monotonic() - t0, cpu_s() - cpu0
    tree = window.tree
    drops = sum(tree.drops.values())
    return {
        "opens": size,
        "events": window.events_seen,
        "drops": drops,
        "drop_kinds": ",".join(f"{k}:{v}" for k, v in tree.drops.items()) or "-",
        "complete": tree.complete,
        "seconds": round(elapsed, 3),
        "events_per_s": round(window.events_seen / elapsed),
        "guard_cpu_s": round(cpu, 3),
        "guard_cpu_pct": round(100 * cpu / elapsed, 1),
        "events_per_guard_cpu_s": round(window.events_seen / cpu) if cpu else 0,
    }


async def main(sizes: list[int], ring_pages: int) -> None:
    print(f"ring_pages={ring_pages} ({ring_pages * os.sysconf('SC_PAGE_SIZE') >> 20} MiB)")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(
        "opens events drops drop_kinds complete seconds events/s guard_cpu_s guard_cpu% "
        "events/guard_cpu_s"
    )
    for size in sizes:
        r = await storm(size, ring_pages)
        print(" ".join(str(v) for v in r.values()), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="25000,50000,100000,200000,400000,800000")
    ap.add_argument("--ring-pages", type=int, default=MonitorConfig().ring_pages)
    a = ap.parse_args()
    anyio.run(main, [int(x) for x in a.sizes.split(",")], a.ring_pages)
