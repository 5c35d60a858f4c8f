"""Online termination (issue 8): event-to-kill latency, and what eager wakeups cost.

Latency: a sandboxed terminal server runs `cat <canary>; sleep 20` per call; the guard's
online rule denies the canary open and SIGKILLs the call. Measured per call from the kernel
event timestamp (bpf_ktime_get_ns, CLOCK_MONOTONIC) to the return of the last kill() (the
guard's time.monotonic_ns()), as the supervisor records it (`Supervisor.kills`).
Cost: a benign file-heavy call (opens N files) timed with online rules on (writing opens and
protected paths wake the reader at once, every open is looked up in the kernel) and off,
in alternating blocks of calls.

    sudo .venv/bin/python bench/online_kill.py [--calls 200] [--files 2000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import fmt, ms, stats
from mtguard_rt import CallDenied, GuardConfig, open_guard
from mtguard_rt.config import OnlineSection
from mtguard_rt.sandbox import SandboxConfig

SERVERS = Path(__file__).resolve().parent.parent / "examples" / "servers"
TERMINAL = [sys.executable, str(SERVERS / "terminal.py")]
EVIL = 'cat $HOME/.s""sh/id_r""sa >/dev/null; sleep 20 # {n}'  # {n}: not a repeated call
CALL_BOUND_S = 10.0


def config(workspace: str, mode: str) -> GuardConfig:
    # kill on touch off: the canary open must reach user space, which is what is measured
    return GuardConfig(
        audit_log=None,
        telemetry={"exporter": "off"},
        online=OnlineSection(mode=mode, kill_on_touch=False),  # type: ignore[arg-type]
        sandbox=SandboxConfig(mounts=[str(SERVERS)], workspace=workspace),
    )


async def latency(workspace: str, calls: int) -> tuple[list[float], list[float]]:
    lat: list[float] = []
    wall: list[float] = []
    async with (
        open_guard(config(workspace, "enforce")) as guard,
        guard.connect(TERMINAL, name="term") as server,
    ):
        sup = guard.servers["term"]
        for n in range(calls):
            t0 = time.perf_counter()
            try:
                with anyio.fail_after(CALL_BOUND_S):
                    await server.call_tool("run_command", {"command": EVIL.format(n=n)})
                raise RuntimeError("the canary call was not denied")
            except CallDenied as exc:
                assert exc.record is not None and exc.record.terminated, exc.record
            wall.append(ms(t0, time.perf_counter()))
            lat.append(sup.kills[-1].latency_ns / 1e6)
    return lat, wall


async def file_heavy(workspace: str, mode: str, calls: int, files: int) -> list[float]:
    cmd = f"find /usr/lib/python3* -name '*.py' | head -n {files} | xargs cat > /dev/null # "
    out: list[float] = []
    async with (
        open_guard(config(workspace, mode)) as guard,
        guard.connect(TERMINAL, name="term") as server,
    ):
        for n in range(calls):
            t0 = time.perf_counter()
            with anyio.fail_after(60):
                await server.call_tool("run_command", {"command": f"{cmd}{n}"})
            out.append(ms(t0, time.perf_counter()))
            assert guard.records[-1].decision == "allow", guard.records[-1].rules
    return out


async def main(args: argparse.Namespace) -> None:
    ws = tempfile.mkdtemp(prefix="mtguard-online-")
    os.chmod(ws, 0o777)
    lat, wall = await latency(ws, args.calls)
    print(f"event -> kill() returned: {fmt(stats(lat))}  max {max(lat):.3f} ms")
    print(f"whole denied call (client view): {fmt(stats(wall))}")
    on: list[float] = []
    off: list[float] = []
    for _ in range(args.rounds):  # alternating blocks: other load on the host hits both alike
        on += await file_heavy(ws, "enforce", args.heavy_calls, args.files)
        off += await file_heavy(ws, "off", args.heavy_calls, args.files)
    print(f"file-heavy call ({args.files} files) online enforce: {fmt(stats(on))}")
    print(f"file-heavy call ({args.files} files) online off:     {fmt(stats(off))}")
    print(
        f"SUMMARY online_kill p95 {stats(lat)['p95']:.3f} ms (target < 5 ms), "
        f"eager-wakeup cost {stats(on)['p50'] - stats(off)['p50']:+.1f} ms at p50 "
        f"per {args.files}-file call"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--heavy-calls", type=int, default=5, help="calls per block")
    ap.add_argument("--rounds", type=int, default=6, help="alternating on/off blocks")
    ap.add_argument("--files", type=int, default=2000)
    anyio.run(main, ap.parse_args(), backend="trio")
