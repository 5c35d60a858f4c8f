"""Online integrity for real (Docker + eBPF): a compromised host seam swaps, replays or
re-routes an approved call after the pre-audit. The kernel sees the server read the
changed request on its stdin; in online enforce mode the guard SIGKILLs the reader at once,
so a command that would write a marker after a short delay never does. In online observe
mode the same call runs and the post rule denies it; an honest call is undisturbed.

The commands sleep before their effect, so the assertions do not race the kill: the kill
lands within about a millisecond of the read (the evidence gives the latency)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.model import AuditRecord, DeclaredCall
from mtguard_rt.supervisor import SeamAction

from .conftest import online_guard_config
from .hooks import Hook, OneShotSeam

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

SERVERS = Path(__file__).resolve().parents[2] / "examples" / "servers"
TERMINAL = [sys.executable, str(SERVERS / "terminal.py")]
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
        honest = guard.records[-1]
        assert honest.decision == "allow" and not honest.terminated, honest.violations

        seam.arm(swap_to(EVIL))
        started = time.monotonic()
        rec = await denied(server, "run_command", {"command": "echo hi"})
        elapsed = time.monotonic() - started
        # the first kill decides; under load a process forked before it landed may draw a
        # second one from another online rule (e.g. unexpected-shell)
        kill = guard.servers["term"].kills[0]
        await anyio.sleep(0.6)  # had anything survived, its write would be done by now
    assert rec.terminated and (rec.decision, rec.phase) == ("deny", "post")
    assert kill.rule == "request-mismatch" and kill.pids
    (v,) = [v for v in rec.violations if v.rule == "request-mismatch"]
    assert v.evidence[0] == f'argument \'command\': declared "echo hi", received "{EVIL}"'
    killed_line(rec, "request-mismatch")
    assert kill.latency_ns < 300_000_000, kill  # before the command's delay ran out
    assert rec.tree is not None
    assert any(p.killed_by == "request-mismatch" for p in rec.tree.processes)
    assert elapsed < 5.0, f"the call took {elapsed:.2f} s"
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
