"""Helpers the agent benchmarks share: an `mtguard agent run` on a private socket, N proxies
held open through it (each initialized), and how many BPF programs a process holds.

Every wait is bounded: the agent's compile by AGENT_START_S, a proxy's start by
PROXY_START_S, every exit by EXIT_S (then SIGKILL).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import _common
import anyio
from _common import ECHO, EXAMPLES, process_client

MTGUARD = str(Path(sys.executable).parent / "mtguard")
AGENT_START_S = 300.0  # one bcc compile on a loaded 2-core machine
PROXY_START_S = 180.0  # interpreter, imports, sandbox, echo.py's answer, loaded
EXIT_S = 60.0  # a proxy's exit: its sandbox's removal, bounded
_common.TIMEOUT_S = 300.0  # a proxy's initialize: a compile on a loaded host (60 s is short)


def bpf_prog_fds(pid: int) -> int:
    """How many BPF programs a live process holds open (its fdinfo says prog_type)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            if "prog_type:" in Path(f"/proc/{pid}/fdinfo/{fd}").read_text():
                n += 1
        except OSError:
            pass
    return n


@asynccontextmanager
async def running_agent(sock: Path) -> AsyncIterator[tuple[Any, str]]:
    """`mtguard agent run --socket sock` until the block ends; (process, its ready line)."""
    proc = await anyio.open_process(
        [MTGUARD, "agent", "run", "--socket", str(sock)], stderr=subprocess.DEVNULL
    )
    try:
        with anyio.fail_after(AGENT_START_S):
            line = b""
            while b"\n" not in line:
                line += await proc.stdout.receive()  # type: ignore[union-attr]
        if b"serving at" not in line:
            raise RuntimeError(f"the agent did not start: {line!r}")
        yield proc, line.decode().strip()
    finally:
        with anyio.CancelScope(shield=True):
            await stop(proc)


async def stop(proc: Any) -> None:
    """SIGTERM (a proxy: its stdin closed first), bounded, then SIGKILL."""
    if proc.stdin is not None:
        try:
            await proc.stdin.aclose()
        except (OSError, anyio.BrokenResourceError):
            pass
    if proc.returncode is None:
        proc.terminate()
    with anyio.move_on_after(EXIT_S):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def start_proxy(env: dict[str, str], err: Path) -> Any:
    """A proxy over echo.py, initialized, with its stdin held open (it serves until closed)."""
    with err.open("w") as errf:
        proc = await anyio.open_process(
            [MTGUARD, "proxy", "--mount", EXAMPLES, "--", *ECHO], env=env, stderr=errf
        )
    try:
        with anyio.fail_after(PROXY_START_S):
            await process_client(proc).initialize()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stop(proc)
        raise
    return proc


@asynccontextmanager
async def proxies(n: int, env: dict[str, str], tmp: Path, tag: str) -> AsyncIterator[list[Any]]:
    """`n` proxies started at once (as a host starts its configured servers)."""
    procs: list[Any] = []

    async def one(i: int) -> None:
        procs.append(await start_proxy(env, tmp / f"{tag}-{i}.err"))

    try:
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        yield procs
    finally:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for p in procs:
                    tg.start_soon(stop, p)
