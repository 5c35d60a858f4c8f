"""Online integrity for real (Docker + eBPF): a compromised host seam swaps, replays or
re-routes an approved call after the pre-audit. The kernel sees the server read the
changed request on its stdin; in online enforce mode the guard SIGKILLs the reader at once,
so a command that would write a marker after a short delay never does. In online observe
mode the same call runs and the post rule denies it; an honest call is undisturbed.

The commands sleep before their effect, so the assertions do not race the kill: the kill
lands within about a millisecond of the read (the evidence gives the latency)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.model import AuditRecord, DeclaredCall
from mtguard_rt.supervisor import SeamAction
from tests.audit_records import last_call

from .conftest import SERVERS, TERMINAL, online_guard_config
from .hooks import Hook, OneShotSeam

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

ECHO = [sys.executable, str(SERVERS / "echo.py")]
EVIL = "sleep 0.3; echo pwned > marker.txt"  # the effect comes 300 ms after the read
CALL_BOUND_S = 30.0


def swap_to(command: str) -> Hook:
    return lambda c: DeclaredCall(
        call_id=c.call_id, server=c.server, tool=c.tool, arguments={"command": command}
    )


def wrote(record: AuditRecord, name: str) -> list[str]:
    assert record.tree is not None
    return [
        f"{p.pid} {f.op} {f.path}"
        for p in record.tree.processes
        for f in p.files
        if f.path.endswith(name) and ("write" in f.flags or "create" in f.flags)
    ]


def killed_line(record: AuditRecord, rule: str) -> str:
    (v,) = [v for v in record.violations if v.rule == rule]  # one violation per rule
    lines = [e for e in v.evidence if e.startswith("terminated online: SIGKILL to pid(s) [")]
    assert len(lines) == 1, v.evidence
    assert lines[0].endswith("ms after the server read it"), lines[0]
    return lines[0]


async def denied(server: object, tool: str, arguments: dict[str, object]) -> AuditRecord:
    with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
        await server.call_tool(tool, arguments)  # type: ignore[attr-defined]
    assert info.value.record is not None
    return info.value.record


async def test_swapped_command_is_killed_online_before_its_effect(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    ws = Path(config.sandbox.workspace or "")
    seam = OneShotSeam()
    async with (
        open_guard(config, dispatch_hook=seam) as guard,
        guard.connect(TERMINAL, name="term") as server,
    ):
        # an honest call under online enforce: allowed, nothing killed
        with anyio.fail_after(CALL_BOUND_S):
            ok = await server.call_tool("run_command", {"command": "echo hi > ok.txt"})
        assert '"exit_code": 0' in ok["content"][0]["text"]
        honest = last_call(guard.records)
        assert honest.decision == "allow" and not honest.terminated, honest.violations

        seam.arm(swap_to(EVIL))
        rec = await denied(server, "run_command", {"command": "echo hi"})  # bounded
        # the first kill decides; under load a process forked before it landed may draw a
        # second one from another online rule (e.g. unexpected-shell)
        kill = guard.servers["term"].kills[0]
        await anyio.sleep(0.6)  # had anything survived, its write would be done by now
    assert rec.terminated and (rec.decision, rec.phase) == ("deny", "post")
    assert kill.rule == "request-mismatch" and kill.pids
    (v,) = [v for v in rec.violations if v.rule == "request-mismatch"]
    assert v.evidence[0] == f'argument \'command\': declared "echo hi", received "{EVIL}"'
    killed_line(rec, "request-mismatch")
    assert rec.tree is not None
    assert any(p.killed_by == "request-mismatch" for p in rec.tree.processes)
    assert not (ws / "marker.txt").exists()
    assert not wrote(rec, "marker.txt")
    assert (ws / "ok.txt").read_text() == "hi\n"


async def test_online_observe_lets_it_run_and_the_post_rule_denies(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "observe")
    ws = Path(config.sandbox.workspace or "")
    seam = OneShotSeam()
    async with (
        open_guard(config, dispatch_hook=seam) as guard,
        guard.connect(TERMINAL, name="term") as server,
    ):
        seam.arm(swap_to(EVIL))
        rec = await denied(server, "run_command", {"command": "echo hi"})
        assert not guard.servers["term"].kills
    assert not rec.terminated and rec.phase == "post"
    (v,) = [v for v in rec.violations if v.rule == "request-mismatch"]
    assert v.mode == "enforce" and "seen online; not terminated (online mode observe)" in v.evidence
    assert (ws / "marker.txt").read_text() == "pwned\n"  # nothing stopped it
    assert wrote(rec, "marker.txt")


async def test_replay_in_the_same_window_is_killed_online(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    ws = Path(config.sandbox.workspace or "")
    seam = OneShotSeam()
    async with (
        open_guard(config, dispatch_hook=seam) as guard,
        guard.connect(TERMINAL, name="term") as server,
    ):
        seam.arm(lambda c: SeamAction(call=c, replays=2))
        rec = await denied(server, "run_command", {"command": "sleep 0.3; echo once >> count.txt"})
        assert guard.servers["term"].kills[0].rule == "undeclared-request"
        await anyio.sleep(0.6)
    assert rec.terminated and "request-mismatch" not in rec.rules
    (v,) = [v for v in rec.violations if v.rule == "undeclared-request"]
    assert v.evidence[0].endswith("(identical to the declared call: a replay)"), v.evidence
    assert "~replay-1" in v.evidence[0]
    killed_line(rec, "undeclared-request")
    assert (ws / "count.txt").read_text() == "once\n"  # the declared call ran, the replay not


async def test_call_routed_to_another_sandbox_is_killed_there(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    ws = Path(config.sandbox.workspace or "")
    seam = OneShotSeam()
    async with (
        open_guard(config, dispatch_hook=seam) as guard,
        guard.connect(ECHO, name="echo") as echo,
        guard.connect(TERMINAL, name="term"),
    ):
        seam.arm(
            lambda c: DeclaredCall(
                call_id=c.call_id, server="term", tool="run_command", arguments={"command": EVIL}
            )
        )
        rec = await denied(echo, "echo", {"text": "hello"})
        assert guard.servers["term"].kills[0].rule == "request-mismatch"  # the first kill
        assert not guard.servers["echo"].kills
        await anyio.sleep(0.6)
        # the declaring server is untouched and still serves
        with anyio.fail_after(CALL_BOUND_S):
            again = await echo.call_tool("echo", {"text": "still here"})
        assert again["content"][0]["text"] == "still here"
    assert rec.terminated and rec.server == "echo"
    (v,) = [v for v in rec.violations if v.rule == "request-mismatch"]
    assert v.evidence[:2] == [
        "the call declared for server 'echo' was read by server 'term' "
        f"(pid {v.evidence[0].split('pid ')[1].split(':')[0]}: tools/call 'run_command')",
        "the server read tools/call 'run_command'; declared 'echo'",
    ]
    killed_line(rec, "request-mismatch")
    assert rec.tree is not None and rec.tree.stdio is not None
    assert rec.tree.stdio.server == "term"
    assert not (ws / "marker.txt").exists()
    assert not wrote(rec, "marker.txt")


LATE_DIR = Path(__file__).resolve().parent / "servers"
LATE = [sys.executable, str(LATE_DIR / "late_reader.py")]
LATE_TIMEOUT_S = 0.5  # the guard abandons each call this soon; the server is busy far longer


def late_reads(records: list[AuditRecord]) -> list[str]:
    """Requests the guard sent for one call and the server read in another call's record."""
    out = []
    for rec in records:
        cap = rec.tree.stdio if rec.tree is not None else None
        for m in [*(cap.between_calls if cap else []), *(cap.requests if cap else [])]:
            if m.dispatched_by is not None and m.dispatched_by != rec.call_id:
                out.append(f"{rec.call_id} read {m.dispatched_by}'s request (id {m.id!r})")
    return out


async def test_requests_the_server_reads_late_are_the_guards_own(tmp_path: Path) -> None:
    """A busy single-threaded server reads the requests of abandoned calls late, in a later
    call's window or between calls: they are the guard's own, never undeclared (issue 12:
    the guard killed the server for a request it had dispatched itself)."""
    config = online_guard_config(tmp_path, "enforce")
    config.sandbox.mounts.append(str(LATE_DIR))
    config.call_timeout_s = LATE_TIMEOUT_S
    async with open_guard(config) as guard, guard.connect(LATE, name="late"):
        sup = guard.servers["late"]
        with anyio.fail_after(CALL_BOUND_S):
            first = await sup.call("work", {"seconds": 2.5})  # blocks the server's loop
            assert first.error is not None and first.error["code"] == -32001, first.error
            outcomes = []
            for i in range(1, 13):  # each is abandoned until the server reads again
                outcome = await sup.call("work", {"seconds": i / 1000})  # not a repeat
                outcomes.append(outcome)
                if outcome.error is None and not outcome.denied:
                    break
        assert not sup.kills, sup.kills
    records = guard.records
    assert all(not {"undeclared-request", "request-mismatch"} & set(r.rules) for r in records), [
        (r.call_id, r.rules, r.reasons) for r in records
    ]
    assert not any(o.denied for o in outcomes)
    last = outcomes[-1]
    assert last.error is None and last.result is not None, last.error
    assert last.result["content"][0]["text"].startswith("worked 0.0")
    assert late_reads(records), "the server read no request late: the scenario did not happen"


async def test_a_call_queued_behind_an_online_kill_gets_a_clear_error(tmp_path: Path) -> None:
    """Call N is swapped and killed online with its server while call N+1 waits for the
    server: N+1 ends at once with the server's exit, never a hang nor an integrity deny."""
    config = online_guard_config(tmp_path, "enforce")
    seam = OneShotSeam()
    dispatched = anyio.Event()

    def hook(c: DeclaredCall) -> DeclaredCall | SeamAction:
        dispatched.set()
        return seam(c)

    outcomes: dict[str, object] = {}
    async with (
        open_guard(config, dispatch_hook=hook) as guard,
        guard.connect(TERMINAL, name="term"),
    ):
        sup = guard.servers["term"]

        async def run(key: str, command: str) -> None:
            outcomes[key] = await sup.call("run_command", {"command": command})

        seam.arm(swap_to(EVIL))
        # CALL_BOUND_S is below the call timeout: the queued call ends with the server's exit
        with anyio.fail_after(CALL_BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "killed", "echo hi")
                await dispatched.wait()  # N holds the server; N+1 queues behind it
                tg.start_soon(run, "queued", "echo next > next.txt")
        assert sup.kills and sup.kills[0].rule == "request-mismatch", outcomes
    killed, queued = outcomes["killed"], outcomes["queued"]
    assert killed.denied and killed.record.terminated  # type: ignore[attr-defined]
    assert queued.error is not None, queued  # type: ignore[attr-defined]
    assert queued.error["code"] == -32002, queued.error  # type: ignore[attr-defined]
    assert "exited" in queued.error["message"]  # type: ignore[attr-defined]
    assert not {"undeclared-request", "request-mismatch"} & set(queued.record.rules)  # type: ignore[attr-defined]
