"""A proxy's `initialize` latency: the host's agent up, in-process, direct, cold host.

    .venv/bin/python bench/agent_startup.py [--starts 5] [--base DIR] [--skip MODE]

Starts `mtguard agent run` on a private socket (its one compile timed), then alternates
`mtguard proxy -- python echo.py` started with MTGUARD_AGENT_SOCKET pointing at it (agent
mode: no compile) and with MTGUARD_AGENT=off (in-process: each proxy compiles and loads its
own program). Measured from spawning the proxy to its `initialize` answer (the host's view:
interpreter start, sandbox, monitor, the server's own answer), then stdin closed and the
proxy's exit timed. Each proxy's stderr mode line is checked, so a run cannot mix modes.
Also per round: `direct` (echo.py spawned on the host, no proxy: the floor) and `cold` (no
agent, MTGUARD_AGENT=auto: the proxy starts one and waits for it; compared to that agent's
own compile + load, read from its log).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import anyio
import anyio.abc
from _common import ECHO, EXAMPLES, fmt, machine, ms, process_client, stats, summary

MTGUARD = str(Path(sys.executable).parent / "mtguard")
AGENT_START_S = 300.0  # one bcc compile on a loaded 2-core machine
EXIT_S = 60.0  # a proxy's exit: its sandbox's removal, bounded
_common.TIMEOUT_S = 300.0  # a proxy's initialize: a compile on a loaded host (60 s is short)


READY: dict[str, list[float]] = {}  # mode -> spawn -> the proxy's "guarding" line, ms


async def _read_err(
    proc: anyio.abc.Process, out: list[bytes], t0: float, seen: list[float]
) -> None:
    """The proxy's stderr, kept; the moment its start-up line ("guarding ...": the sandbox
    is up and its server released, the proxy's own part of the start done) is noted."""
    assert proc.stderr is not None
    async for chunk in proc.stderr:
        out.append(chunk)
        if not seen and b"guarding " in b"".join(out):
            seen.append(ms(t0, time.perf_counter()))


async def one_start(
    env: dict[str, str], mode: str, err: Path, key: str | None = None
) -> tuple[float, float]:
    """(spawn -> initialize answered, stdin closed -> exited) in ms; spawn -> the proxy's
    start-up line in READY[key or mode] (the rest: the server's own start in its sandbox)."""
    cmd = [MTGUARD, "proxy", "--mount", EXAMPLES, "--", *ECHO]
    said_b: list[bytes] = []
    seen: list[float] = []
    t0 = time.perf_counter()
    proc = await anyio.open_process(cmd, env=env, stderr=subprocess.PIPE, cwd=err.parent)
    async with proc, anyio.create_task_group() as tg:
        tg.start_soon(_read_err, proc, said_b, t0, seen)
        await process_client(proc).initialize()
        t1 = time.perf_counter()
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with anyio.fail_after(EXIT_S):
            await proc.wait()
        t2 = time.perf_counter()
    said = b"".join(said_b).decode(errors="replace")
    err.write_text(said)  # noqa: ASYNC240 - off the measured path
    if f"monitor: {mode}" not in said:
        raise RuntimeError(f"expected mode {mode!r}, the proxy said: {said!r}")
    READY.setdefault(key or mode, []).extend(seen)
    return ms(t0, t1), ms(t1, t2)


async def direct_start() -> float:
    """`python echo.py` on the host, no proxy, no sandbox: spawn -> initialize answered."""
    t0 = time.perf_counter()
    proc = await anyio.open_process(ECHO, stderr=subprocess.DEVNULL)
    async with proc:
        await process_client(proc).initialize()
        t1 = time.perf_counter()
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with anyio.fail_after(EXIT_S):
            await proc.wait()
    return ms(t0, t1)


async def cold_start(tmp: Path, i: int) -> tuple[float, float]:
    """A cold host (no agent) with MTGUARD_AGENT=auto: the proxy starts the agent and waits
    for it. (spawn -> initialize answered, the agent's own compile + load) in ms; the agent
    is stopped after."""
    from mtguard_rt.agent.client import connect_agent
    from mtguard_rt.agent.protocol import Request
    from mtguard_rt.errors import MonitorLost

    sock = tmp / f"cold-{i}" / "run" / "agent.sock"
    state = tmp / f"cold-{i}" / "state"
    env = {**os.environ, "MTGUARD_AGENT": "auto", "MTGUARD_AGENT_SOCKET": str(sock),
           "XDG_STATE_HOME": str(state)}  # fmt: skip
    init, _ = await one_start(env, "agent", tmp / f"err-cold-{i}", key="cold")
    said = (tmp / f"err-cold-{i}").read_text()
    if "started on demand" not in said:
        raise RuntimeError(f"the cold proxy did not start the agent: {said!r}")
    log = (state / "mtguard" / "agent.log").read_text()
    load_ms = float(log.split("program loaded in ")[1].split(" ms")[0])
    program = connect_agent(sock)
    try:
        program.call(Request(op="stop"))
    except MonitorLost:
        pass  # it closed before its reply went out
    finally:
        program.close()
    with anyio.fail_after(EXIT_S):
        while sock.exists():  # noqa: ASYNC110 - another process's exit: nothing to wait on
            await anyio.sleep(0.1)
    return init, load_ms


async def cold_only(starts: int) -> None:
    """Only cold starts (`--cold-only`): each against its own agent's compile + load."""
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="mtguard-agent-bench-") as tmp:
        init, load = [], []
        for i in range(starts):
            a, load_ms = await cold_start(Path(tmp), i)
            init.append(a)
            load.append(load_ms)
            print(f"  cold start {i + 1}: initialize {a:7.0f} ms (its agent's compile + load "
                  f"{load_ms:.0f} ms)", flush=True)  # fmt: skip
    over = [a - b for a, b in zip(init, load, strict=True)]
    summary("agent_startup_cold", f"cold host on demand: initialize p50 {stats(init)['p50']:.0f} "
            f"ms = its agent's compile + {stats(over)['p50']:.0f} ms (p50), n={starts}")


def start_agent(sock: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(  # the agent outlives every measured start
        [MTGUARD, "agent", "run", "--socket", str(sock)], stdout=subprocess.PIPE, text=True,
        env=env, cwd=sock.parent,
    )  # fmt: skip


async def agent_ready(agent: subprocess.Popen[str], t0: float, what: str) -> None:
    assert agent.stdout is not None
    with anyio.fail_after(AGENT_START_S):
        line = await anyio.to_thread.run_sync(agent.stdout.readline)
    if "serving at" not in line:
        raise RuntimeError(f"the {what} agent did not start: {line!r}")
    print(f"{what} agent up in {ms(t0, time.perf_counter()):.0f} ms: {line.strip()}")


async def main(starts: int, base: str | None, skip: set[str]) -> None:
    """With `base` (a checkout of older code, e.g. a `git worktree`): `agent-base` starts too,
    the same proxy run from that code (PYTHONPATH) against an agent of its own code, so the
    before/after ratio comes from one run."""
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="mtguard-agent-bench-") as tmp:
        sock = Path(tmp) / "run" / "agent.sock"
        sock.parent.mkdir(parents=True)
        modes = [m for m in ("agent", "agent-base", "in-process", "direct", "cold")
                 if m not in skip and (m != "agent-base" or base)]  # fmt: skip
        init: dict[str, list[float]] = {m: [] for m in modes}
        exits: dict[str, list[float]] = {m: [] for m in modes if m not in ("direct", "cold")}
        cold_load: list[float] = []
        agents = []
        try:
            t0 = time.perf_counter()
            agents.append(start_agent(sock, dict(os.environ)))
            await agent_ready(agents[-1], t0, "this code's")
            envs = {"agent": {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)},
                    "in-process": {**os.environ, "MTGUARD_AGENT": "off",
                                   "MTGUARD_AGENT_SOCKET": str(sock)}}  # fmt: skip
            if base:
                base_sock = Path(tmp) / "base" / "run" / "agent.sock"
                base_sock.parent.mkdir(parents=True)
                base_env = {**os.environ, "PYTHONPATH": base}
                t0 = time.perf_counter()
                agents.append(start_agent(base_sock, base_env))
                await agent_ready(agents[-1], t0, "the base code's")
                envs["agent-base"] = {**base_env, "MTGUARD_AGENT_SOCKET": str(base_sock)}
            for i in range(starts):
                for mode in [m for m in modes if m in envs]:
                    said = "agent" if mode == "agent-base" else mode
                    a, b = await one_start(envs[mode], said, Path(tmp) / f"err-{mode}-{i}", mode)
                    init[mode].append(a)
                    exits[mode].append(b)
                    print(f"  {mode:<10} start {i + 1}: initialize {a:7.0f} ms (the proxy's "
                          f"start-up line at {READY[mode][-1]:7.0f} ms), exit {b:6.0f} ms",
                          flush=True)  # fmt: skip
                if "direct" in modes:
                    init["direct"].append(await direct_start())
                    print(f"  direct     start {i + 1}: initialize {init['direct'][-1]:7.0f} ms")
                if "cold" in modes:
                    a, load_ms = await cold_start(Path(tmp), i)
                    init["cold"].append(a)
                    cold_load.append(load_ms)
                    print(f"  cold       start {i + 1}: initialize {a:7.0f} ms (its agent's "
                          f"compile + load {load_ms:.0f} ms)", flush=True)  # fmt: skip
        finally:
            for agent in agents:
                agent.terminate()
                agent.wait(60)
                if agent.stdout is not None:
                    agent.stdout.close()
    for mode in modes:
        print(f"{mode:<10} initialize: {fmt(stats(init[mode]))}")
    for mode in exits:
        print(f"{mode:<10} exit:       {fmt(stats(exits[mode]))}")
    for mode in READY:
        print(f"{mode:<10} start-up line (proxy's own part): {fmt(stats(READY[mode]))}")
    p = {mode: stats(init[mode])["p50"] for mode in modes}
    line = f"proxy initialize p50: agent up {p['agent']:.0f} ms"
    if "agent-base" in p:
        line += f", agent up on the base code {p['agent-base']:.0f} ms " \
                f"({p['agent-base'] / p['agent']:.2f}x)"
        r = {m: stats(READY[m])["p50"] for m in ("agent", "agent-base")}
        line += f"; the proxy's own part (to its start-up line) {r['agent']:.0f} ms vs " \
                f"{r['agent-base']:.0f} ms on the base code ({r['agent-base'] / r['agent']:.2f}x)"
    if "in-process" in p:
        line += f", in-process {p['in-process']:.0f} ms ({p['in-process'] / p['agent']:.1f}x)"
    if "direct" in p:
        line += f", direct (no proxy) {p['direct']:.0f} ms"
    if "cold" in p:
        print(f"cold agent compile + load: {fmt(stats(cold_load))}")
        over = [a - b for a, b in zip(init["cold"], cold_load, strict=True)]
        line += f", cold host on demand {p['cold']:.0f} ms = its agent's compile + " \
                f"{stats(over)['p50']:.0f} ms (p50)"
    summary("agent_startup", f"{line}; n={starts} each")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--cold-only", action="store_true", help="only cold-host starts")
    parser.add_argument("--base", metavar="DIR", help="also start proxies of the code in DIR "
                        "(a worktree of an older commit): before/after in one run")
    parser.add_argument("--skip", action="append", default=[], metavar="MODE",
                        choices=["in-process", "direct", "cold"], help="leave a mode out")
    args = parser.parse_args()
    if args.cold_only:
        anyio.run(cold_only, args.starts, backend="trio")
    else:
        anyio.run(main, args.starts, args.base, set(args.skip), backend="trio")
