"""Workers for real (Docker + eBPF): a call that leaves a child running settles without
waiting for it, and the child is followed after the call: a backgrounded job that reads the
canary once the result is back is seen between calls and killed by the call's online rules;
its between-call record carries it, and the secret read quarantines the server (the next call
is refused). The job acts when the test says so (a file it waits for), never after a delay
that load could stretch past the call's end."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.between_calls import is_between
from mtguard_rt.model import AuditRecord

from .conftest import READ_CANARY, TERMINAL, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 30.0
# a call that waited for its worker would wait until this bound (the worker outlives it)
SETTLE_MAX_MS = 600_000
SURVIVED_S = 2.5  # the job's write comes 2 s after its canary read: had it survived, by now


def last_call(records: list[AuditRecord]) -> AuditRecord:
    """The last call's record: a between-call period sealed as that call's window opened is
    recorded concurrently with the call, so it may come after it."""
    return [r for r in records if not is_between(r)][-1]


async def test_a_long_lived_child_settles_fast_and_is_a_worker(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    config.monitor.settle_max_ms = SETTLE_MAX_MS
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": "(sleep 600 >/dev/null 2>&1 &)"})
    rec = last_call(guard.records)
    assert rec.decision == "allow", rec.violations
    assert rec.tree is not None and rec.tree.workers
    (sleeper,) = [p for p in rec.tree.processes if p.exe == "/usr/bin/sleep"]
    assert sleeper.key in rec.tree.workers and sleeper.still_running
    (v,) = [v for v in rec.violations if v.rule == "incomplete-tree"]
    assert v.mode == "observe" and "left running as a worker" in v.evidence[0]


async def test_a_backgrounded_canary_read_after_the_result_is_killed(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")  # user space only: no kill on touch
    config.monitor.settle_max_ms = SETTLE_MAX_MS
    ws = Path(config.sandbox.workspace or "")
    wait = "while [ ! -e go ]; do sleep 0.05; done"  # until the test says so
    job = f"({wait}; {READ_CANARY}; sleep 2; echo done > after.txt) >/dev/null 2>&1 &"
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        sup = guard.servers["term"]
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": job})
        first = last_call(guard.records)
        assert not sup.kills
        (ws / "go").touch()  # the call is over: the job reads the canary now
        with anyio.fail_after(CALL_BOUND_S):
            while not sup.kills:  # noqa: ASYNC110 - the kill is the worker's, between calls
                await anyio.sleep(0.05)
            await anyio.sleep(SURVIVED_S)
            while not (read := _between_read(guard.records)):  # noqa: ASYNC110 - its record
                await anyio.sleep(0.05)
            with pytest.raises(CallDenied) as info:  # a secret read between calls quarantines
                await server.call_tool("run_command", {"command": "echo next"})
    assert sup.quarantined is not None and "canary-touched" in sup.quarantined
    refused = info.value.record
    assert refused is not None and refused.rules == ["quarantined"]
    kill = sup.kills[0]
    assert (kill.rule, kill.call_id) == ("canary-touched", first.call_id)
    assert first.tree is not None and first.tree.workers
    assert first.decision == "allow", first.violations  # the read came after its answer
    between = read.tree
    assert between is not None and read.decision == "deny"
    killed = [p for p in between.processes if p.killed_by == "canary-touched"]
    assert killed, [(p.command_line, p.killed_by) for p in between.processes]
    assert any(f.path.endswith("/.ssh/id_rsa") for p in between.processes for f in p.files)
    assert not (ws / "after.txt").exists()


def _between_read(records: list[AuditRecord]) -> AuditRecord | None:
    """The between-call record of the worker's canary read, once cut and judged."""
    return next((r for r in records if is_between(r) and "canary-touched" in r.rules), None)
