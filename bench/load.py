"""Load: sequential and parallel guarded calls; errors, leaks and memory growth.

    .venv/bin/python bench/load.py [--sequential 1000] [--servers 8] [--per-server 100]

One guard with the eBPF monitor (full pipeline, no LLM), `tools/call echo` to
examples/servers/echo.py in the sandbox:
1. `--sequential` calls one after another on one server;
2. `--servers` servers connected to the same guard, `--per-server` calls each, all servers in
   one task group, calls starting together once every server is connected.
Counts errors (exceptions, denials, incomplete trees), this guard's containers and this
process's open fds before, during and after, and the guard process's RSS (VmRSS) after
warm-up, every 250 sequential calls, around the parallel phase and at the end.
Target (issue 4): no errors, no leaks, RSS growth under 10 %.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from _common import (
    ECHO,
    EXAMPLES,
    fd_count,
    fmt,
    machine,
    ms,
    own_containers,
    rss_kib,
    stats,
    summary,
)

from mtguard_rt import GuardConfig, open_guard
from mtguard_rt.sandbox import SandboxConfig

POLICY = str(Path(__file__).resolve().parent / "load_policy.toml")  # shadowed-tool observed
CONFIG = GuardConfig(audit_log=None, telemetry={"exporter": "off"}, policies=[POLICY],
                     sandbox=SandboxConfig(mounts=[EXAMPLES]))
WARMUP = 50
PARALLEL_WARMUP = 10


class Tally:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.latency: list[float] = []

    async def call(self, guard: Any, server: Any, key: str, keep: bool = True) -> None:
        t0 = time.perf_counter()
        try:
            result = await server.call_tool("echo", {"text": key})
        except Exception as exc:  # counted, not raised: the run reports every failure
            self.errors.append(f"{key}: {type(exc).__name__}: {exc}")
            return
        wall = ms(t0, time.perf_counter())
        text = (result.get("content") or [{}])[0].get("text")
        if text != key:
            self.errors.append(f"{key}: wrong result {result!r}")
        if keep:
            self.latency.append(wall)


def incomplete(guard: Any, server_name: str) -> int:
    return sum(1 for r in guard.records if r.server == server_name and not r.tree_complete)


def pct_growth(a: int, b: int) -> str:
    return f"{(b - a) / a * 100:+.1f} %"


async def main(sequential: int, servers: int, per_server: int) -> None:
    print(f"# load: {machine()}")
    fds_before = fd_count()
    rss: dict[str, int] = {"start": rss_kib()}
    seq, par = Tally(), Tally()
    seen_containers: dict[str, int] = {}
    incomplete_trees = 0
    t_par = 0.0
    async with open_guard(CONFIG) as guard:
        rss["guard open (BPF loaded)"] = rss_kib()
        # The BPF module (71 programs, their perf events, the maps) stays loaded for the
        # process's life by design (compiled once per process): the fd baseline is taken here.
        fds_guard = fd_count()
        # 1. sequential
        async with guard.connect(ECHO, name="seq") as srv:
            for i in range(WARMUP):
                await seq.call(guard, srv, f"warm {i}", keep=False)
            gc.collect()
            rss["seq warm"] = rss_kib()
            fds_seq_warm = fd_count()
            t0 = time.perf_counter()
            for i in range(sequential):
                await seq.call(guard, srv, f"seq {i}")
                if (i + 1) % 250 == 0:
                    rss[f"seq {i + 1}"] = rss_kib()
            t_seq = ms(t0, time.perf_counter())
            fds_seq_end = fd_count()
            seen_containers["sequential"] = len(own_containers())
            incomplete_trees += sum(1 for r in guard.records if not r.tree_complete)

        # 2. parallel
        connected = 0
        all_connected = anyio.Event()
        warm_done = 0
        all_warm = anyio.Event()
        go = anyio.Event()

        async def worker(n: int) -> None:
            nonlocal connected, warm_done, incomplete_trees
            async with guard.connect(ECHO, name=f"par{n}") as server:
                connected += 1
                if connected == servers:
                    all_connected.set()
                await all_connected.wait()
                for i in range(PARALLEL_WARMUP):
                    await par.call(guard, server, f"par{n} warm {i}", keep=False)
                warm_done += 1
                if warm_done == servers:
                    all_warm.set()
                await go.wait()
                for i in range(per_server):
                    await par.call(guard, server, f"par{n} {i}")

        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for n in range(servers):
                    tg.start_soon(worker, n)
                await all_warm.wait()
                gc.collect()
                rss["parallel warm"] = rss_kib()
                seen_containers["parallel"] = len(own_containers())
                fds_par_warm = fd_count()
                t0 = time.perf_counter()
                go.set()
                # the workers return after their calls; the group then closes their servers
            t_par = ms(t0, time.perf_counter())
        incomplete_trees += sum(1 for r in guard.records
                                if r.server.startswith("par") and not r.tree_complete)
        gc.collect()
        rss["end (servers closed, guard open)"] = rss_kib()
        records = len(guard.records)
    fds_after = fd_count()
    left = own_containers()

    print(f"## sequential: {sequential} calls in {t_seq / 1000:.1f} s "
          f"({sequential / t_seq * 1000:.0f} calls/s)")
    print(f"latency {fmt(stats(seq.latency))}")
    print(f"## parallel: {servers} servers x {per_server} calls in {t_par / 1000:.1f} s "
          f"({servers * per_server / t_par * 1000:.0f} calls/s)")
    print(f"latency {fmt(stats(par.latency))}")
    errors = seq.errors + par.errors
    print(f"errors: {len(errors)}  incomplete trees: {incomplete_trees}  "
          f"records kept by the guard: {records}")
    if errors:
        print(f"  by server: {dict(Counter(e.split()[0] for e in errors))}")
    for e in errors[:10]:
        print(f"  {e}")
    print(f"containers: {seen_containers} during, {len(left)} after")
    print(f"fds: {fds_before} before open_guard, {fds_guard} guard open (BPF module), "
          f"{fds_seq_warm} seq warm, {fds_seq_end} seq end, {fds_par_warm} parallel warm, "
          f"{fds_after} after the guard closed (the BPF module stays loaded per process)")
    print("RSS (KiB):")
    for k, v in rss.items():
        print(f"  {k:36} {v:8d}")
    seq_growth = pct_growth(rss["seq warm"], rss[f"seq {sequential - sequential % 250}"]
                            if sequential >= 250 else rss["seq warm"])
    total_growth = pct_growth(rss["seq warm"], rss["end (servers closed, guard open)"])
    par_growth = pct_growth(rss["parallel warm"], rss["end (servers closed, guard open)"])
    print(f"RSS growth: sequential {seq_growth}, from seq warm-up to the end {total_growth}, "
          f"parallel phase {par_growth}")
    leaks = len(left) + (fds_after - fds_guard) + (fds_seq_end - fds_seq_warm)
    summary("load", f"{sequential} sequential + {servers}x{per_server} parallel calls: "
            f"{len(errors)} errors, {incomplete_trees} incomplete trees, {len(left)} containers "
            f"left, fds {fds_guard}->{fds_after} (guard open -> closed); "
            f"RSS growth {total_growth} (seq {seq_growth}); "
            f"seq p50 {stats(seq.latency)['p50']:.2f} ms, parallel p50 "
            f"{stats(par.latency)['p50']:.2f} ms{'; LEAK' if leaks else ''}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=1000)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--per-server", type=int, default=100)
    parser.add_argument("--backend", default="trio", choices=["trio", "asyncio"])
    args = parser.parse_args()
    anyio.run(main, args.sequential, args.servers, args.per_server, backend=args.backend)
