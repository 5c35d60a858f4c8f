"""Real eBPF: with `workers`, a call that leaves a child running settles without waiting for
it; the child is a worker (`tree.workers`), and what it does after the window is in the next
window's between-call record and reaches the closed call's online hook (no hole). The worker
acts when the test says so (no delay that load could stretch past the window's end)."""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import pytest
from monitor_harness import CALL, GatedCgroup, gated_cgroup

from mtguard_rt.model import DeclaredCall, FileEvent
from mtguard_rt.monitor import MonitorConfig, open_monitor

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]

# A line-driven "server": "spawn" starts a detached child that writes `late` after a delay and
# stays a while (a helper, a backgrounded job) and answers at once; "hold" starts one that
# writes `late` once the server is told "go"; anything else just answers.
SERVER = """
import subprocess, sys
late = sys.argv[1]
held = None
for line in sys.stdin:
    if line.strip() == "spawn":
        subprocess.Popen(["sh", "-c", f"sleep 0.3; echo x > {late}; sleep 0.4"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         start_new_session=True)
    elif line.strip() == "hold":
        held = subprocess.Popen(["sh", "-c", f"read _; echo x > {late}; sleep 0.4"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                start_new_session=True)
    elif line.strip() == "go" and held is not None:
        held.stdin.write(b"go\\n"); held.stdin.flush()
    print("ok", flush=True)
"""
# a window that waited for its worker would wait for the "go" sent after it: until the settle
# bound (far longer than this hang guard)
HELD_SETTLE_MS = 120_000
HANG_S = 30
NEXT = DeclaredCall(call_id="t2", server="test", tool="run", arguments={"x": 2})


async def ask(cg: GatedCgroup, proc: Any, line: bytes) -> None:
    await proc.stdin.send(line)
    assert await cg.line() == b"ok"


async def test_a_worker_does_not_hold_the_call_and_its_later_work_is_recorded(
    tmp_path: os.PathLike[str],
) -> None:
    late = f"{tmp_path}/late"
    seen: list[tuple[int, Any]] = []
    wrote = anyio.Event()

    def hook(window: Any, proc: Any, ev: Any) -> None:
        seen.append((proc.pid, ev))
        if isinstance(ev, FileEvent) and ev.path == late:
            wrote.set()  # the worker's open of `late`, seen by the closed call's hook

    config = MonitorConfig(settle_max_ms=HELD_SETTLE_MS, workers=True)
    async with (
        open_monitor(config) as mon,
        gated_cgroup() as cg,
        cg.run([sys.executable, "-c", SERVER, late]) as proc,
        mon.watch(cg.id, str(cg.path)) as watch,
    ):
        await cg.release(proc)
        with anyio.fail_after(HANG_S):  # the window settles with its worker still waiting
            async with watch.window(CALL, hook) as first:
                await ask(cg, proc, b"hold\n")
                first.response_arrived()
        with anyio.fail_after(HANG_S):
            await ask(cg, proc, b"go\n")  # no window open: the worker writes now
            await wrote.wait()  # between the windows
        async with watch.window(NEXT) as second:
            await ask(cg, proc, b"next\n")
            second.response_arrived()
    tree = first.tree
    workers = [p for p in tree.processes if p.key in tree.workers]
    assert workers  # the detached shell (and its sleep, when forked by then)
    assert all(p.still_running and p.learned == "observed" and p.end_ns is None for p in workers)
    assert not any(f.path == late for p in tree.processes for f in p.files)  # not yet
    between = second.tree.between
    assert between is not None and between.call.call_id == CALL.call_id
    # the record spans the gap: from the first window's end to the second one's opening
    assert tree.window_end_ns <= between.window_start_ns <= between.window_end_ns
    assert between.window_end_ns < second.tree.window_end_ns
    writers = [p for p in between.processes if any(f.path == late for f in p.files)]
    assert len(writers) == 1, [p.command_line for p in between.processes]
    assert writers[0].key in tree.workers  # the same process, followed past its window
    hooked = [ev.path for _, ev in seen if isinstance(ev, FileEvent)]
    assert late in hooked  # the closed call's online rules saw the worker's write
    assert tree.complete and second.tree.complete


async def test_without_workers_the_window_waits_for_the_child(
    tmp_path: os.PathLike[str],
) -> None:
    late = f"{tmp_path}/late"
    async with (
        open_monitor(MonitorConfig(settle_max_ms=3000)) as mon,
        gated_cgroup() as cg,
        cg.run([sys.executable, "-c", SERVER, late]) as proc,
        mon.watch(cg.id, str(cg.path)) as watch,
    ):
        await cg.release(proc)
        async with watch.window(CALL) as window:
            await ask(cg, proc, b"spawn\n")
            window.response_arrived()
    tree = window.tree
    assert not tree.workers and tree.between is None
    assert any(f.path == late for p in tree.processes for f in p.files)
