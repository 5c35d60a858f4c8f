"""Consent for real: a sandboxed terminal server, kill on touch on. The task asks for one
alias in ~/.bashrc (a write-only canary the kernel kills writers of): the call that appends
exactly that line runs and is allowed, with the consent recorded; one appending a line the
task did not ask for is SIGKILLed in the kernel at its open, and so is the asked-for line
in a later call whose task does not ask for it (the lift ends with the call)."""

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

TASK = "Add the alias ll='ls -la' to my ~/.bashrc"
ASKED = "echo \"alias ll='ls -la'\" >> ~/.bashrc"
VIA_VAR = 'f=~/.bashrc; echo "alias ll=\'ls -la\'" >> "$f"'
CALL_BOUND_S = 15.0


async def test_kill_on_touch_honours_the_calls_consent_and_only_that(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="term") as server:
        with anyio.fail_after(CALL_BOUND_S):
            done = await server.call_tool("run_command", {"command": ASKED}, task=TASK)
        rec = last_call(guard.records)
        assert (rec.decision, rec.terminated) == ("allow", False), rec.reasons
        (consent,) = [v for v in rec.violations if v.rule == "canary-touched"]
        assert consent.mode == "observe"
        assert consent.evidence == [
            "/home/mtguard/.bashrc: written with the user's consent (the task names it, and "
            "it asks for every line the call added)"
        ]
        assert '"exit_code": 0' in done["content"][0]["text"]

        with anyio.fail_after(CALL_BOUND_S):
            tail = await server.call_tool("run_command", {"command": "tail -n 1 ~/.bashrc"})
        assert "alias ll='ls -la'" in tail["content"][0]["text"]

        # a line the task did not ask for: no consent, the kernel kills the writer (through
        # a variable: spelled out, the pre-audit's persistence-write denies it unsent)
        unasked = 'f=~/.bashrc; echo "alias ls=\'rm -i\'" >> "$f"'
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": unasked}, task=TASK)
        denied = info.value.record
        assert denied is not None and denied.terminated and "kill-on-touch" in denied.rules
        # the asked-for line again, under a task that does not ask for it: killed as well
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("run_command", {"command": VIA_VAR}, task="Tidy my notes")
        again = info.value.record
        assert again is not None and "kill-on-touch" in again.rules

        with anyio.fail_after(CALL_BOUND_S):
            tail = await server.call_tool("run_command", {"command": "tail -n 2 ~/.bashrc"})
        text = tail["content"][0]["text"]
        assert "rm -i" not in text and text.count("alias ll='ls -la'") == 1
