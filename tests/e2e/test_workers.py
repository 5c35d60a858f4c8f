"""Workers for real (Docker + eBPF): a call that leaves a child running settles in
milliseconds, and the child is followed after the call: a backgrounded job that reads the
canary once the result is back is seen between calls and killed by the call's online rules;
the next call's tree carries it (`between`)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mtguard_rt import open_guard

from .conftest import READ_CANARY, TERMINAL, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 30.0
SETTLE_MS = 100.0  # a worker must not hold the call (the old bound held it 1,000 ms)


async def test_a_long_lived_child_settles_fast_and_is_a_worker(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": "(sleep 30 >/dev/null 2>&1 &)"})
    rec = guard.records[-1]
    assert rec.decision == "allow", rec.violations
    assert rec.timings_ms.settle < SETTLE_MS, rec.timings_ms
    assert rec.tree is not None and rec.tree.workers
    (sleeper,) = [p for p in rec.tree.processes if p.exe == "/usr/bin/sleep"]
    assert sleeper.key in rec.tree.workers and sleeper.still_running
    (v,) = [v for v in rec.violations if v.rule == "incomplete-tree"]
    assert v.mode == "observe" and "left running as a worker" in v.evidence[0]


async def test_a_backgrounded_canary_read_after_the_result_is_killed(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")  # user space only: no kill on touch
    ws = Path(config.sandbox.workspace or "")
    job = f"(sleep 0.3; {READ_CANARY}; sleep 0.5; echo done > after.txt) >/dev/null 2>&1 &"
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        sup = guard.servers["term"]
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": job})
        first = guard.records[-1]
        with anyio.fail_after(CALL_BOUND_S):
            while not sup.kills:  # noqa: ASYNC110 - the kill is the worker's, between calls
                await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # had the job survived, after.txt would be written by now
            again = await server.call_tool("run_command", {"command": "echo next"})
        second = guard.records[-1]
    assert '"stdout": "next\\n"' in again["content"][0]["text"]
    kill = sup.kills[0]
    assert (kill.rule, kill.call_id) == ("canary-touched", first.call_id)
    assert first.tree is not None and first.tree.workers
    assert first.timings_ms.settle < SETTLE_MS, first.timings_ms
    assert second.tree is not None and second.tree.between is not None
    between = second.tree.between
    assert between.call.call_id == first.call_id
    killed = [p for p in between.processes if p.killed_by == "canary-touched"]
    assert killed, [(p.command_line, p.killed_by) for p in between.processes]
    assert any(f.path.endswith("/.ssh/id_rsa") for p in between.processes for f in p.files)
    assert not (ws / "after.txt").exists()
