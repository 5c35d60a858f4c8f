"""Real-kernel test harness: a throw-away cgroup v2 directory and a gated process in it.

`GatedCgroup.run(cmd)` starts `cmd` behind a shell gate: the shell moves itself into the
cgroup, says so on stdout, waits for a line on stdin, then execs `cmd`, so a window can open
first. `cg.line()` reads the command's stdout line by line (keep its output small).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from mtguard_rt.model import BehaviorTree, DeclaredCall, FileEvent, ProcessNode
from mtguard_rt.monitor import Monitor, MonitorConfig, open_monitor

CGROUP2_ROOT = Path("/sys/fs/cgroup/unified")
GATE = 'echo $$ > "$0/cgroup.procs" && echo in-cgroup && read _ && exec "$@"'


class GatedCgroup:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = os.stat(path).st_ino
        self._out: BufferedByteReceiveStream | None = None

    async def line(self) -> bytes:
        assert self._out is not None
        with anyio.fail_after(10):
            return await self._out.receive_until(b"\n", 65536)

    @asynccontextmanager
    async def run(self, cmd: Sequence[str], cwd: str | None = None) -> AsyncIterator[Process]:
        proc = await anyio.open_process(
            ["sh", "-c", GATE, str(self.path), *cmd],
            cwd=cwd,
            stderr=None,
        )
        assert proc.stdout is not None
        self._out = BufferedByteReceiveStream(proc.stdout)
        try:
            assert await self.line() == b"in-cgroup"
            yield proc
        finally:
            with anyio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.kill()
                with anyio.move_on_after(5):
                    await proc.wait()
                await proc.aclose()

    async def release(self, proc: Process) -> None:
        assert proc.stdin is not None
        await proc.stdin.send(b"go\n")

    def kill_all(self) -> None:
        for line in (self.path / "cgroup.procs").read_text().split():
            try:
                os.kill(int(line), 9)
            except ProcessLookupError:
                pass


@asynccontextmanager
async def gated_cgroup() -> AsyncIterator[GatedCgroup]:
    path = CGROUP2_ROOT / f"mtguard-test-{secrets.token_hex(4)}"
    path.mkdir()
    cg = GatedCgroup(path)
    try:
        yield cg
    finally:
        with anyio.CancelScope(shield=True):
            cg.kill_all()
            with anyio.move_on_after(5):
                # teardown only: SIGKILLed pids leave the cgroup asynchronously, no fd to wait on
                while (path / "cgroup.procs").read_text().strip():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            path.rmdir()


CALL = DeclaredCall(call_id="t1", server="test", tool="run", arguments={"x": 1})


async def traced(
    cmd: Sequence[str],
    *,
    cwd: str | None = None,
    monitor: Monitor | None = None,
    config: MonitorConfig | None = None,
    wait_s: float = 30,
) -> BehaviorTree:
    """Run `cmd` gated in a fresh cgroup; the response 'arrives' when it exits."""
    if monitor is None:
        async with open_monitor(config or MonitorConfig(settle_max_ms=2000)) as mon:
            return await traced(cmd, cwd=cwd, monitor=mon, wait_s=wait_s)
    async with gated_cgroup() as cg:
        return await traced_in(cg, cmd, monitor, cwd=cwd, wait_s=wait_s)


async def traced_in(
    cg: GatedCgroup,
    cmd: Sequence[str],
    monitor: Monitor,
    *,
    cwd: str | None = None,
    wait_s: float = 30,
) -> BehaviorTree:
    async with cg.run(cmd, cwd=cwd) as proc, monitor.watch(cg.id, str(cg.path)) as watch:
        async with watch.window(CALL) as window:
            await cg.release(proc)
            with anyio.fail_after(wait_s):
                await proc.wait()
            window.response_arrived()
        return window.tree


def by_exe(tree: BehaviorTree, suffix: str) -> list[ProcessNode]:
    return [p for p in tree.processes if p.exe.endswith(suffix)]


def all_files(tree: BehaviorTree) -> list[FileEvent]:
    return [f for p in tree.processes for f in p.files]
