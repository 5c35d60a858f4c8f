"""Between-call records for real (Docker + eBPF, issue 14): a call that leaves a background job
which, 2 s after the call answered, reads the canary or appends to ~/.bashrc yields an audit
record of its own, WITHOUT a further call, with the rule and its evidence, and (enforce) the
job is killed; a benign background job writing its own log in the workspace yields a between
record with no violation at all."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from mtguard_rt import open_guard
from mtguard_rt.between_calls import BETWEEN_TOOL, is_between
from mtguard_rt.model import AuditRecord
from tests.audit_records import last_call

from .conftest import READ_CANARY, TERMINAL, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 30.0
DELAY_S = 2.0  # the job acts this long after the call answered
RECORD_BOUND_S = 15.0  # the record must come by then with no further call (policy: ~0.5 s)
# a killed job's next step comes 3 s after its canary read: had it survived, done by then
NEXT_STEP_S, SURVIVED_S = 3, 3.5


async def _between_record(guard: object, wanted: str | None) -> tuple[AuditRecord, float]:
    """The first between record (with rule `wanted`, if given), and when it was emitted."""
    records: list[AuditRecord] = guard.records  # type: ignore[attr-defined]
    with anyio.fail_after(RECORD_BOUND_S):
        while True:
            for r in records:
                if r.tool == BETWEEN_TOOL and (wanted is None or wanted in r.rules):
                    return r, time.time()
            await anyio.sleep(0.02)


def _effect_wall(record: AuditRecord, suffix: str) -> float:
    assert record.tree is not None
    off = record.tree.wall_offset_ns
    times = [f.ts_ns for p in record.tree.processes for f in p.files if f.path.endswith(suffix)]
    assert times, [(p.command_line, [f.path for f in p.files]) for p in record.tree.processes]
    return (min(times) + off) / 1e9


async def test_a_canary_read_after_the_call_is_its_own_record_and_killed(
    tmp_path: Path,
) -> None:
    config = online_guard_config(tmp_path, "enforce")  # user space: the online rule kills
    ws = Path(config.sandbox.workspace or "")
    job = (f"(sleep {DELAY_S}; {READ_CANARY}; sleep {NEXT_STEP_S}; echo done > after.txt)"
           " >/dev/null 2>&1 &")  # fmt: skip
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": job})
        call = last_call(guard.records)
        assert call.decision == "allow", call.violations
        rec, emitted = await _between_record(guard, "canary-touched")
        await anyio.sleep(SURVIVED_S)
        calls = [r for r in guard.records if not is_between(r)]
    assert calls == [call]  # no further call was made
    assert rec.tool == BETWEEN_TOOL and rec.call_id.startswith("term-between-")
    assert rec.decision == "deny" and rec.phase == "post" and rec.terminated
    (v,) = [v for v in rec.violations if v.rule == "canary-touched"]
    assert v.mode == "enforce"
    assert any("terminated online between calls" in e for e in v.evidence), v.evidence
    assert any(".ssh/id_rsa" in e for e in v.evidence), v.evidence
    assert rec.tree is not None
    assert any(p.killed_by == "canary-touched" for p in rec.tree.processes)
    assert not (ws / "after.txt").exists()
    assert call.tree is not None  # the read happened after the call, between calls
    assert not any(f.path.endswith("/.ssh/id_rsa") for p in call.tree.processes for f in p.files)
    latency = emitted - _effect_wall(rec, "/.ssh/id_rsa")  # bounded by RECORD_BOUND_S
    print(f"canary read -> between record: {latency * 1000:.0f} ms")


async def test_a_bashrc_append_after_the_call_is_killed_in_the_kernel_and_recorded(
    tmp_path: Path,
) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    ws = Path(config.sandbox.workspace or "")
    job = (
        f"(sleep {DELAY_S}; echo 'alias ls=true' >> $HOME/.b\"\"ashrc; echo done > after.txt)"
        " >/dev/null 2>&1 &"
    )
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": job})
        last = last_call(guard.records)
        assert last.decision == "allow", last.violations
        rec, emitted = await _between_record(guard, "kill-on-touch")
    assert rec.decision == "deny" and rec.terminated
    (v,) = [v for v in rec.violations if v.rule == "kill-on-touch"]
    assert any(".bashrc" in e and "SIGKILLed in the kernel" in e for e in v.evidence), v.evidence
    assert not (ws / "after.txt").exists()  # the shell died at the open, before the next line
    latency = emitted - _effect_wall(rec, "/.bashrc")  # bounded by RECORD_BOUND_S
    print(f"~/.bashrc append -> between record: {latency * 1000:.0f} ms")


async def test_a_benign_background_log_writer_yields_a_record_that_does_not_deny(
    tmp_path: Path,
) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    ws = Path(config.sandbox.workspace or "")
    job = "(for i in 1 2 3; do sleep 0.5; echo tick $i >> job.log; done) >/dev/null 2>&1 &"
    async with open_guard(config) as guard, guard.connect(TERMINAL, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": job})
        await _between_record(guard, None)  # the first comes without a further call
        with anyio.fail_after(RECORD_BOUND_S):  # the job ends (load may stretch its sleeps)
            log = ws / "job.log"
            while not log.exists() or len(log.read_text().splitlines()) < 3:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": "cat job.log"})
        between = [r for r in guard.records if r.tool == BETWEEN_TOOL]  # not the start-up's
    assert (ws / "job.log").read_text().split("\n")[:3] == ["tick 1", "tick 2", "tick 3"]
    print("benign between records:", [(r.call_id, r.rules) for r in between])
    for r in between:
        assert not r.violations, [(v.rule, v.reason, v.evidence) for v in r.violations]
        assert r.decision == "allow"
        assert not r.terminated
    wrote = [
        f.path for r in between if r.tree for p in r.tree.processes for f in p.files
        if f.path.endswith("/job.log")
    ]
    assert wrote, "the job's log writes are in the between records"
    assert len(between) <= 4  # cut by policy (0.5 s after an effect, 2 s apart), not per event
