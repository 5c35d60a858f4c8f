"""Cost of stdio integrity capture (EV_STDIO), before/after in one run.

    .venv/bin/python bench/stdio_integrity.py [--pairs 200000] [--calls 300] [--rounds 3]

1. Syscall tax on an unwatched process: 64-byte write()+read() pairs over a pipe in this
   process, before any BPF is loaded, then with the monitor loaded (every read/write now
   runs the stdio hooks' `wire` lookup, and the network section's write hooks), then with
   the stdio read/readv/fcntl hooks detached (the write hooks are shared: left on).
2. Per guarded call: `tools/call echo` through `open_guard` to a sandboxed echo.py, in
   alternating calls with the sandbox's wire fds in the `wire` map (captured, reassembled,
   checked by the integrity rules) and removed from it (nothing captured), same guard.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import anyio
from _common import ECHO, EXAMPLES, fmt, machine, ms, own_containers, stats, summary

from mtguard_rt import GuardConfig, open_guard
from mtguard_rt.sandbox import SandboxConfig

CONFIG = GuardConfig(
    audit_log=None, telemetry={"exporter": "off"}, sandbox=SandboxConfig(mounts=[EXAMPLES])
)
WARMUP = 20
STDIO_READ_TPS = [
    f"syscalls:sys_{side}_{call}".encode()
    for side in ("enter", "exit")
    for call in ("read", "readv", "fcntl")
]


def pipe_pairs(n: int) -> float:
    """ns per 64-byte write()+read() pair on a pipe."""
    r, w = os.pipe()
    buf = b"x" * 64
    try:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            os.write(w, buf)
            os.read(r, 64)
        return (time.perf_counter_ns() - t0) / n
    finally:
        os.close(r)
        os.close(w)


def tax(n: int, rounds: int) -> float:
    return statistics.median(pipe_pairs(n) for _ in range(rounds))


async def calls(server: object, n: int, start: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        t0 = time.perf_counter()
        await server.call_tool("echo", {"text": f"hello {i}"})  # type: ignore[attr-defined]
        out.append(ms(t0, time.perf_counter()))
    return out


async def main(pairs: int, n_calls: int, rounds: int) -> None:
    print(f"# stdio_integrity: {machine()}")
    before = tax(pairs, rounds)
    print(f"pipe write+read, no BPF:            {before:.0f} ns/pair")
    on: list[float] = []
    off: list[float] = []
    async with open_guard(CONFIG) as guard:
        assert guard.monitor is not None
        program = guard.monitor.program
        loaded = tax(pairs, rounds)
        print(f"pipe write+read, monitor loaded:    {loaded:.0f} ns/pair")
        async with guard.connect(ECHO, name="echo") as server:
            await calls(server, WARMUP, 0)
            table = program._bpf["wire"]
            cg = server.supervisor.watch.cgroup_id  # type: ignore[union-attr]
            entries = [(k, v) for k, v in table.items() if v.cgroup_id == cg]
            assert entries, "the sandbox's wire fds are not in the map"
            for r in range(rounds):  # alternate per call: load drift hits both alike
                a: list[float] = []
                b: list[float] = []
                for i in range(n_calls):
                    a += await calls(server, 1, 2 * (r * n_calls + i))
                    program.wire_forget(cg)
                    b += await calls(server, 1, 2 * (r * n_calls + i) + 1)
                    for k, v in entries:
                        table[k] = v
                on += a
                off += b
                print(f"round {r + 1}: captured p50 {statistics.median(a):.3f} ms, "
                      f"not captured p50 {statistics.median(b):.3f} ms")
            captured = [x for x in guard.records if x.tree is not None and x.tree.stdio]
            assert any(x.tree.stdio.requests for x in captured)  # type: ignore[union-attr]
        for tp in STDIO_READ_TPS:
            program._bpf.detach_tracepoint(tp)
        detached = tax(pairs, rounds)
        print(f"pipe write+read, stdio read hooks detached: {detached:.0f} ns/pair")
    s_on, s_off = stats(on), stats(off)
    print(f"guarded call, stdio captured:     {fmt(s_on)}")
    print(f"guarded call, stdio not captured: {fmt(s_off)}")
    ratio = s_on["p50"] / s_off["p50"]
    print(f"per-call ratio captured/not (p50): {ratio:.3f}")
    left = own_containers()
    summary(
        "stdio_integrity",
        f"pipe write+read {before:.0f} ns/pair without BPF, {loaded:.0f} with the monitor "
        f"loaded ({loaded / before:.2f}x), {detached:.0f} with the stdio read hooks detached; "
        f"guarded echo p50 {s_on['p50']:.3f} ms captured vs {s_off['p50']:.3f} ms not "
        f"(ratio {ratio:.3f}); containers left {len(left)}",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    anyio.run(main, args.pairs, args.calls, args.rounds)
