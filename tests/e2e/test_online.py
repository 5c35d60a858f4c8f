"""Online termination for real: a sandboxed terminal server whose command reads the canary
key, sleeps and would then write into the workspace. In enforce mode the guard kills the
call's processes on the canary open, so the write never happens and the call ends at once,
denied with `phase: "post"`; a benign call on the same server is undisturbed; a server that
reads the canary itself is killed and reported exited; in observe
mode the same command runs to completion and the violation is only recorded. With kill on
touch the kernel kills `cat` at the canary open itself and the online rule the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.model import AuditRecord
from tests.audit_records import last_call

from .conftest import READ_CANARY, SERVERS, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 15.0  # an unkilled call would sleep 20 s and hit this first


def spawned(record: AuditRecord) -> list[str]:
    assert record.tree is not None
    return [p.exe for p in record.tree.processes if p.learned == "observed"]


async def test_canary_read_kills_the_call_before_its_write(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")  # user space only: no kill on touch
    ws = Path(config.sandbox.workspace or "")
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="term") as server:
        benign = await server.call_tool("run_command", {"command": "echo hi > ok.txt; cat ok.txt"})
        assert '"stdout": "hi\\n"' in benign["content"][0]["text"]
        last = last_call(guard.records)
        assert last.decision == "allow" and not last.terminated

        evil = f"{READ_CANARY}; sleep 20; echo done > after.txt"
        # within CALL_BOUND_S, shorter than the sleep: the call ended with the kill, not the
        # command (no wall-clock bound of its own: a loaded machine stretches the kill's path)
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": evil})
        rec = info.value.record
        assert rec is not None and rec.terminated
        assert (rec.decision, rec.phase, rec.rules[0]) == ("deny", "post", "canary-touched")
        lines = rec.violations[0].evidence
        assert "/home/mtguard/.ssh/id_rsa" in lines[0]
        assert lines[1].startswith("terminated online: SIGKILL to pid(s) [")
        assert rec.tree is not None
        killed = [p for p in rec.tree.processes if p.killed_by == "canary-touched"]
        assert any(p.exe == "/usr/bin/sh" for p in killed)  # the script died mid-way
        assert all(p.end_ns is not None and not p.still_running
                   for p in rec.tree.processes if p.learned == "observed")  # fmt: skip
        assert "/usr/bin/sleep" not in spawned(rec) or any(
            p.exe == "/usr/bin/sleep" for p in killed
        )
        assert guard.servers["term"].kills[0].rule == "canary-touched"  # the first kill decides

        # the server itself survived (the offender was its child) but held a secret: it is
        # quarantined, so it cannot hand the key over on a later call
        with pytest.raises(CallDenied) as later:
            await server.call_tool("run_command", {"command": "cat ok.txt"})
        assert later.value.record is not None and later.value.record.rules == ["quarantined"]
    assert not (ws / "after.txt").exists()
    assert (ws / "ok.txt").read_text() == "hi\n"


async def test_observe_mode_records_online_but_does_not_kill(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "observe")
    ws = Path(config.sandbox.workspace or "")
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="term") as server:
        evil = f"{READ_CANARY}; sleep 0.5; echo done > after.txt"
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": evil})
    rec = info.value.record
    assert rec is not None and not rec.terminated
    assert (rec.decision, rec.phase, rec.rules[0]) == ("deny", "post", "canary-touched")
    assert rec.violations[0].evidence[1] == "seen online; not terminated (online mode observe)"
    assert rec.tree is not None and not any(p.killed_by for p in rec.tree.processes)
    assert (ws / "after.txt").read_text() == "done\n"  # nothing stopped it


async def test_kill_on_touch_kills_the_reader_in_the_kernel(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": f"{READ_CANARY}; sleep 20"})
    rec = info.value.record
    assert rec is not None and rec.terminated and rec.phase == "post"
    assert rec.rules == ["canary-touched", "kill-on-touch"]
    assert rec.tree is not None
    (cat,) = [p for p in rec.tree.processes if p.exe == "/usr/bin/cat"]
    assert cat.killed_by == "kill-on-touch: open of /home/mtguard/.ssh/id_rsa"
    sh = next(p for p in rec.tree.processes if p.exe == "/usr/bin/sh")
    assert sh.killed_by == "canary-touched"  # the online rule took the rest of the tree


async def test_a_server_reading_the_canary_itself_is_killed(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")  # user space only: the online rule decides
    config.sandbox.env = {"MTGUARD_RUGPULL_PAYLOAD": "aws", "MTGUARD_RUGPULL_AFTER": "0"}
    command = [sys.executable, str(SERVERS / "calculator.py")]
    async with open_guard(config) as guard, guard.connect(command, name="calc") as server:
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("calculate", {"expression": "6*7"}, task="what is 6*7")
        with anyio.fail_after(CALL_BOUND_S):
            await server.upstream.closed.wait()  # the sandbox reports the server exited
    rec = info.value.record
    assert rec is not None and rec.terminated
    assert (rec.phase, rec.rules[0]) == ("post", "canary-touched")
    assert "/home/mtguard/.aws/credentials" in rec.violations[0].evidence[0]
    assert rec.tree is not None
    (killed,) = [p for p in rec.tree.processes if p.killed_by]
    assert killed.learned == "seeded" and killed.argv[-1].endswith("calculator.py")
    assert killed.killed_by == "canary-touched"
    assert "MTGCANARY" not in str(rec.result)
