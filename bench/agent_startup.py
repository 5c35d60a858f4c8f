"""A proxy's `initialize` latency with the host's agent up vs its own in-process monitor.

    .venv/bin/python bench/agent_startup.py [--starts 5]

Starts `mtguard agent run` on a private socket (its one compile timed), then alternates
`mtguard proxy -- python echo.py` started with MTGUARD_AGENT_SOCKET pointing at it (agent
mode: no compile) and with MTGUARD_AGENT=off (in-process: each proxy compiles and loads its
own program). Measured from spawning the proxy to its `initialize` answer (the host's view:
interpreter start, sandbox, monitor, the server's own answer), then stdin closed and the
proxy's exit timed. Each proxy's stderr mode line is checked, so a run cannot mix modes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from _common import ECHO, EXAMPLES, fmt, machine, ms, process_client, stats, summary

MTGUARD = str(Path(sys.executable).parent / "mtguard")
AGENT_START_S = 300.0  # one bcc compile on a loaded 2-core machine
EXIT_S = 60.0  # a proxy's exit: its sandbox's removal, bounded


async def one_start(env: dict[str, str], mode: str, err: Path) -> tuple[float, float]:
    """(spawn -> initialize answered, stdin closed -> exited) in ms."""
    cmd = [MTGUARD, "proxy", "--mount", EXAMPLES, "--", *ECHO]
    with err.open("w") as errf:
        t0 = time.perf_counter()
        proc = await anyio.open_process(cmd, env=env, stderr=errf)
        async with proc:
            await process_client(proc).initialize()
            t1 = time.perf_counter()
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with anyio.fail_after(EXIT_S):
                await proc.wait()
            t2 = time.perf_counter()
    said = err.read_text()  # noqa: ASYNC240 - off the measured path
    if f"monitor: {mode}" not in said:
        raise RuntimeError(f"expected mode {mode!r}, the proxy said: {said!r}")
    return ms(t0, t1), ms(t1, t2)


async def main(starts: int) -> None:
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="mtguard-agent-bench-") as tmp:
        sock = Path(tmp) / "run" / "agent.sock"
        t0 = time.perf_counter()
        agent = subprocess.Popen(  # noqa: ASYNC220 - the agent outlives every measured start
            [MTGUARD, "agent", "run", "--socket", str(sock)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert agent.stdout is not None
            with anyio.fail_after(AGENT_START_S):
                line = await anyio.to_thread.run_sync(agent.stdout.readline)
            if "serving at" not in line:
                raise RuntimeError(f"the agent did not start: {line!r}")
            print(f"agent up in {ms(t0, time.perf_counter()):.0f} ms: {line.strip()}")
            on = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
            off = {**os.environ, "MTGUARD_AGENT": "off", "MTGUARD_AGENT_SOCKET": str(sock)}
            init: dict[str, list[float]] = {"agent": [], "in-process": []}
            exits: dict[str, list[float]] = {"agent": [], "in-process": []}
            for i in range(starts):
                for mode, env in (("agent", on), ("in-process", off)):
                    a, b = await one_start(env, mode, Path(tmp) / f"err-{mode}-{i}")
                    init[mode].append(a)
                    exits[mode].append(b)
                    print(f"  {mode:<10} start {i + 1}: initialize {a:7.0f} ms, exit {b:6.0f} ms",
                          flush=True)  # fmt: skip
        finally:
            agent.terminate()
            agent.wait(60)
            if agent.stdout is not None:
                agent.stdout.close()
    for mode in init:
        print(f"{mode:<10} initialize: {fmt(stats(init[mode]))}")
        print(f"{mode:<10} exit:       {fmt(stats(exits[mode]))}")
    p_on, p_off = stats(init["agent"])["p50"], stats(init["in-process"])["p50"]
    summary(
        "agent_startup",
        f"proxy initialize p50 {p_on:.0f} ms with the agent vs {p_off:.0f} ms in-process "
        f"({p_off / p_on:.1f}x), n={starts} each",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    anyio.run(main, args.starts, backend="trio")
