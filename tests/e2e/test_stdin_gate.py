"""The stdin gate for real (Docker + eBPF, online enforce with kernel kills): each read of
the MCP stdin stops the server in the kernel until the online integrity rules have checked
what it read. The check is made slow here (200 ms per request read, a guard under load):
a compromised host's swapped call whose effect is immediate is still killed before the
server runs a single command of it, every round; a replayed call likewise; honest calls go
on undisturbed, call after call. Without the gate (kill on touch off) the swapped command runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.audit.online import OnlineRules
from mtguard_rt.eval.evidence import cut_before_effect, side_effects
from mtguard_rt.model import AuditRecord, DeclaredCall, StdioMessage
from mtguard_rt.supervisor import SeamAction
from tests.audit_records import last_call

from .conftest import TERMINAL, online_guard_config
from .hooks import OneShotSeam

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

EVIL = "echo pwned > marker.txt"  # no delay: without the gate the shell often wins the race
CALL_BOUND_S = 30.0
ROUNDS = 3
SLOW_CHECK_S = 0.2  # the shell's echo takes a few ms: far less than this


def swap(call: DeclaredCall) -> DeclaredCall:
    return DeclaredCall(
        call_id=call.call_id, server=call.server, tool=call.tool, arguments={"command": EVIL}
    )


def replay(call: DeclaredCall) -> SeamAction:
    return SeamAction(call=call, replays=1)


def spawned(record: AuditRecord) -> list[str]:
    assert record.tree is not None
    return [" ".join(p.argv) for p in record.tree.processes if p.learned == "observed"]


@pytest.fixture
def slow_check(monkeypatch: pytest.MonkeyPatch) -> None:
    check = OnlineRules.check

    def slow(self: OnlineRules, proc: Any, ev: Any) -> Any:
        if isinstance(ev, StdioMessage):
            time.sleep(SLOW_CHECK_S)  # blocks the guard's event loop, as load would
        return check(self, proc, ev)

    monkeypatch.setattr(OnlineRules, "check", slow)


@pytest.mark.usefixtures("slow_check")
async def test_a_swapped_or_replayed_call_is_cut_before_any_effect(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    ws = Path(config.sandbox.workspace or "")
    seam = OneShotSeam()
    async with open_guard(config, dispatch_hook=seam) as guard:
        for n in range(ROUNDS):
            async with guard.connect(TERMINAL, name=f"term{n}") as server:
                for i in range(3):  # honest calls under the gate: answered, nothing killed
                    with anyio.fail_after(CALL_BOUND_S):
                        ok = await server.call_tool("run_command", {"command": f"echo {i}"})
                    assert '"exit_code": 0' in ok["content"][0]["text"]
                    honest = last_call(guard.records)
                    assert honest.decision == "allow" and not honest.terminated
                seam.arm(swap if n % 2 == 0 else replay)
                with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
                    await server.call_tool("run_command", {"command": "echo hi"})
            rec = info.value.record
            assert rec is not None and rec.terminated, rec.reasons
            rule = "request-mismatch" if n % 2 == 0 else "undeclared-request"
            assert guard.servers.get(f"term{n}") is None
            assert rule in rec.rules, rec.rules
            assert rec.tree is not None
            assert cut_before_effect(rec.tree, rec.terminated), side_effects(rec.tree)
            if n % 2 == 0:
                assert not any("pwned" in argv for argv in spawned(rec)), spawned(rec)
            assert not (ws / "marker.txt").exists()


@pytest.mark.usefixtures("slow_check")
async def test_without_the_gate_a_slow_check_loses_the_race(tmp_path: Path) -> None:
    """The control: kill on touch off (no gate), the same slow check: the swapped command
    has run by the time the kill lands."""
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=False)
    ws = Path(config.sandbox.workspace or "")
    seam = OneShotSeam()
    async with (
        open_guard(config, dispatch_hook=seam) as guard,
        guard.connect(TERMINAL, name="term") as server,
    ):
        seam.arm(swap)
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": "echo hi"})
    rec = info.value.record
    assert rec is not None and "request-mismatch" in rec.rules
    assert (ws / "marker.txt").read_text() == "pwned\n"
