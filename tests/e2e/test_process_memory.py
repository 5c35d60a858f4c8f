"""Another process's memory, for real: a sandboxed server (tests/e2e/servers/memtap.py)
whose tool opens its helper's /proc/<pid>/mem for writing and reads from it. The open is in
the tree and `process-control` denies the call (its result withheld); the benign twin, the
server reading its own /proc/self/mem, is allowed."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from mtguard_rt import CallDenied, open_guard
from tests.audit_records import last_call

from .conftest import online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

SERVERS = Path(__file__).resolve().parent / "servers"
CALL_BOUND_S = 30.0
TASK = "Check that the service is healthy"


async def test_opening_another_process_memory_is_denied_own_memory_is_not(
    tmp_path: Path,
) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    box = msgspec.structs.replace(config.sandbox, mounts=[*config.sandbox.mounts, str(SERVERS)])
    command = [sys.executable, str(SERVERS / "memtap.py")]
    async with open_guard(config) as guard, guard.connect(command, name="mt", sandbox=box) as srv:
        with anyio.fail_after(CALL_BOUND_S):
            own = await srv.call_tool("status", {"probe": "self"}, task=TASK)
        assert "read 1 byte of my own memory" in own["content"][0]["text"], own
        last = last_call(guard.records)
        assert last.decision == "allow", last.reasons

        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await srv.call_tool("status", {"probe": "child"}, task=TASK)
        rec = info.value.record
        assert rec is not None and "process-control" in rec.rules, rec.reasons
        (v,) = [v for v in rec.violations if v.rule == "process-control"]
        assert v.mode == "enforce"
        assert any("/mem to write: the memory of process" in e for e in v.evidence), v.evidence
        assert rec.result is None  # withheld: the host never got "opened pid ...'s memory"
