"""Lost events fail closed, for real: a sandboxed terminal server under a guard whose ring
buffer is 16 pages (64 KiB), enforce mode. A call that floods writing opens (thousands of
files in /tmp: a burst far bigger than the ring) loses records of its own sandbox in the
kernel, counted per cgroup and kind (`open_write`), and `lost-events` denies it (its result
withheld); a small call on the same ring loses nothing and is allowed."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from mtguard_rt import CallDenied, Guard, GuardedServer, open_guard
from mtguard_rt.config import MonitorSection
from mtguard_rt.monitor.loader import unload_program
from tests.audit_records import last_call

from .conftest import SERVERS, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 60.0
RING_PAGES = 16  # its own program: unloaded at the end, the session's default ring stays
FLOOD = "for i in $(seq 20000); do echo x > /tmp/f$i; done; echo flooded"
SMALL = "echo x > /tmp/one; echo small"
TASK = "Write the scratch files"


async def test_a_flood_that_sheds_writing_opens_is_denied_a_small_call_is_not(
    tmp_path: Path,
) -> None:
    base = online_guard_config(tmp_path, "enforce")
    config = msgspec.structs.replace(base, monitor=MonitorSection(ring_pages=RING_PAGES))
    command = [sys.executable, str(SERVERS / "terminal.py")]
    try:
        async with open_guard(config) as guard, guard.connect(command, name="fl") as server:
            await small_allowed_flood_denied(guard, server, CALL_BOUND_S)
    finally:
        unload_program(RING_PAGES)


async def small_allowed_flood_denied(guard: Guard, server: GuardedServer, bound_s: float) -> None:
    """On a small ring: the small call is allowed with nothing lost; the flood is denied by
    `lost-events` in enforce mode, its evidence and tree counting lost writing opens."""
    with anyio.fail_after(bound_s):
        out = await server.call_tool("run_command", {"command": SMALL}, task=TASK)
    assert "small" in out["content"][0]["text"]
    rec = last_call(guard.records)
    assert rec.decision == "allow" and "lost-events" not in rec.rules, rec.violations

    with anyio.fail_after(bound_s), pytest.raises(CallDenied) as info:
        await server.call_tool("run_command", {"command": FLOOD}, task=TASK)
    denied = info.value.record
    assert denied is not None and "lost-events" in denied.rules, denied.reasons
    (v,) = [v for v in denied.violations if v.rule == "lost-events"]
    assert v.mode == "enforce"
    assert any(e.startswith("open_write: ") for e in v.evidence), v.evidence
    assert denied.tree is not None and denied.tree.lost.get("open_write", 0) > 0
