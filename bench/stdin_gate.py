"""Cost of the stdin gate (the kernel stops the server on each complete MCP message until the
online rules have checked it), before/after in one run.

    .venv/bin/python bench/stdin_gate.py [--calls 200] [--rounds 3]

`tools/call echo` through `open_guard` to a sandboxed echo.py (online enforce, kill on touch:
the default), alternating per call between the window gated (`Watch.gate_stdin`, as the
guard sets it) and not gated, same guard and sandbox, so load drift hits both alike.
"""

from __future__ import annotations

import argparse
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


async def one(server: object, i: int) -> float:
    t0 = time.perf_counter()
    await server.call_tool("echo", {"text": f"hello {i}"})  # type: ignore[attr-defined]
    return ms(t0, time.perf_counter())


async def main(n_calls: int, rounds: int) -> None:
    print(f"# stdin_gate: {machine()}")
    gated: list[float] = []
    open_: list[float] = []
    async with open_guard(CONFIG) as guard, guard.connect(ECHO, name="echo") as server:
        watch = server.supervisor.watch  # type: ignore[attr-defined]
        assert watch is not None and watch.gate_stdin, "the default guard gates the stdin"
        for i in range(WARMUP):
            await one(server, i)
        n = WARMUP
        for r in range(rounds):
            a: list[float] = []
            b: list[float] = []
            for _ in range(n_calls):
                watch.gate_stdin = True
                a.append(await one(server, n))
                watch.gate_stdin = False
                b.append(await one(server, n + 1))
                n += 2
            watch.gate_stdin = True
            gated += a
            open_ += b
            print(f"round {r + 1}: gated p50 {statistics.median(a):.3f} ms, "
                  f"not gated p50 {statistics.median(b):.3f} ms")  # fmt: skip
        denied = [x for x in guard.records if x.decision == "deny"]
        assert not denied, [x.rules for x in denied]
    s_on, s_off = stats(gated), stats(open_)
    print(f"guarded call, stdin gated:     {fmt(s_on)}")
    print(f"guarded call, stdin not gated: {fmt(s_off)}")
    added = s_on["p50"] - s_off["p50"]
    left = own_containers()
    summary(
        "stdin_gate",
        f"guarded echo p50 {s_on['p50']:.3f} ms gated vs {s_off['p50']:.3f} ms not "
        f"(+{added:.3f} ms, ratio {s_on['p50'] / s_off['p50']:.3f}); p95 {s_on['p95']:.3f} vs "
        f"{s_off['p95']:.3f} ms; containers left {len(left)}",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    anyio.run(main, args.calls, args.rounds)
