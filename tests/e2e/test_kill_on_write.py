"""Kernel kill on write of the policy's exact persistence files in the sandbox home, for
real: a sandboxed terminal server, enforce mode, kill on touch on. An append to ~/.zshenv
that no task asks for is denied before dispatch when the command spells the file out, and
SIGKILLed in the kernel at its open when it goes through a variable (not one byte lands);
the same append under a task that asks for it runs, is consented (its content read back)
and lands; the lift ends with the call."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from tests.audit_records import last_call

from .conftest import SERVERS, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

APPEND = "echo 'export EDITOR=vim' >> ~/.zshenv"
# the same through a variable: the pre-audit cannot read the target, the kernel sees it
VIA_VAR = "f=~/.zshenv; echo 'export EDITOR=vim' >> \"$f\""
CHECK = "test -s ~/.zshenv && cat ~/.zshenv || echo EMPTY"
CALL_BOUND_S = 15.0


async def test_an_unasked_persistence_append_dies_in_the_kernel_an_asked_one_lands(
    tmp_path: Path,
) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="term") as server:
        # spelled out, the pre-audit denies it: never sent
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": APPEND}, task="Tidy my notes")
        pre = info.value.record
        assert pre is not None and (pre.phase, pre.rules) == ("pre", ["persistence-write"])
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": VIA_VAR}, task="Tidy my notes")
        denied = info.value.record
        assert denied is not None and denied.terminated
        assert "kill-on-touch" in denied.rules, denied.reasons
        with anyio.fail_after(CALL_BOUND_S):
            out = await server.call_tool("run_command", {"command": CHECK}, task="Show ~/.zshenv")
        assert "EMPTY" in out["content"][0]["text"]

        task = "Add the line export EDITOR=vim to my ~/.zshenv"
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("run_command", {"command": APPEND}, task=task)
        rec = last_call(guard.records)
        assert (rec.decision, rec.terminated) == ("allow", False), rec.reasons
        (consent,) = [v for v in rec.violations if v.rule == "persistence-write"]
        assert consent.mode == "observe"
        assert "asks for every line the call added" in consent.evidence[0]
        with anyio.fail_after(CALL_BOUND_S):
            out = await server.call_tool("run_command", {"command": CHECK}, task="Show ~/.zshenv")
        assert out["content"][0]["text"].count("export EDITOR=vim") == 1

        # the lift ended with that call: the same append under another task dies again
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": VIA_VAR}, task="Tidy my notes")
        again = info.value.record
        assert again is not None and "kill-on-touch" in again.rules
