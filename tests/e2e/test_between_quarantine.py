"""What a server's own threads do between calls, judged for real (Docker + eBPF, issues 14,
17), with the timers server (tests/e2e/servers/timers.py): no call's process acts, the
server's timer does, after the call answered.

- A secret read between calls (the SSH canary into the server's memory) is a denying record
  that quarantines the server in enforce: the next call, which would hand the secret over
  (disguised), is refused and nothing returned holds it. In observe mode the same call hands
  it over: the quarantine is what stops it.
- A signal between calls: to a host process (outside the sandbox's pid namespace: refused by
  the kernel, recorded, judged harmless, the host process lives) and to the helper the server
  started with itself (delivered: `process-control` denies the record; not a confidentiality
  deny, so the server is not quarantined and the next call is served).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from mtguard_rt import CallDenied, GuardConfig, open_guard
from mtguard_rt.model import BETWEEN_TOOL, AuditRecord, SignalEvent

from .conftest import online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

HERE = Path(__file__).resolve().parent / "servers"
TIMERS = [sys.executable, str(HERE / "timers.py")]
CALL_BOUND_S = 60.0
RECORD_BOUND_S = 30.0  # the record comes by then with no further call (policy: ~0.5 s)
TASK = "Remind me of my dentist appointment tomorrow"
KEY = "/.ssh/id_rsa"


def _config(tmp_path: Path, observe: bool = False) -> GuardConfig:
    config = online_guard_config(tmp_path, "enforce")
    config.sandbox.mounts.append(str(HERE))
    return msgspec.structs.replace(config, observe=observe)


async def _between(guard: object, pred: object) -> AuditRecord:
    records: list[AuditRecord] = guard.records  # type: ignore[attr-defined]
    with anyio.move_on_after(RECORD_BOUND_S):
        while True:
            for r in records:
                if r.tool == BETWEEN_TOOL and pred(r):  # type: ignore[operator]
                    return r
            await anyio.sleep(0.05)
    seen = [(r.call_id, r.rules, _story(r)) for r in records if r.tool == BETWEEN_TOOL]
    raise AssertionError(f"no such between record in {RECORD_BOUND_S:g} s: {seen}")


def _story(r: AuditRecord) -> list[str]:
    if r.tree is None:
        return []
    return [f"{p.exe} {[(s.name, s.target_pid, s.result) for s in p.signals]}"
            for p in r.tree.processes]  # fmt: skip


def _read_key(r: AuditRecord) -> bool:
    return r.tree is not None and any(
        f.path.endswith(KEY) for p in r.tree.processes for f in p.files
    )


@pytest.mark.parametrize("observe", [False, True], ids=["enforce", "observe"])
async def test_a_secret_read_between_calls_quarantines_so_no_later_call_returns_it(
    tmp_path: Path, observe: bool
) -> None:
    async with (
        open_guard(_config(tmp_path, observe)) as guard,
        guard.connect(TIMERS, name="timers") as server,
    ):
        sup = guard.servers["timers"]
        (secret,) = [v for k, v in sup.canaries.items() if k.endswith(KEY)]
        with anyio.fail_after(CALL_BOUND_S):
            out = await server.call_tool("schedule", {"action": "read"}, task=TASK)
        assert "armed" in out["content"][0]["text"]
        assert guard.records[-1].decision == "allow", guard.records[-1].violations
        rec = await _between(guard, _read_key)
        assert rec.decision == "deny" and "canary-touched" in rec.rules, rec.violations
        assert not rec.terminated  # the server's own thread: judged, not killed
        if observe:
            assert sup.quarantined is None
            with anyio.fail_after(CALL_BOUND_S):
                out = await server.call_tool("held", {}, task=TASK)
            assert secret.strip()[::-1][:40] in out["content"][0]["text"]  # handed over
            return
        assert sup.quarantined is not None and "canary-touched" in sup.quarantined
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("held", {}, task=TASK)
        refused = info.value.record
        assert refused is not None and refused.rules == ["quarantined"]
        assert refused.tree is None  # never sent to the server
        said = f"{info.value} {refused.reasons}"  # all the host is told: no secret in it
        assert secret.strip()[:40] not in said and secret.strip()[::-1][:40] not in said


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    """A host process, outside the sandbox: its pid is not one of the sandbox's namespace."""
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield host
    finally:
        host.kill()
        host.wait(10)


async def test_signals_between_calls_are_recorded_and_judged(
    tmp_path: Path, host_process: subprocess.Popen[bytes]
) -> None:
    host = host_process
    async with (
        open_guard(_config(tmp_path)) as guard,
        guard.connect(TIMERS, name="timers") as server,
    ):
        sup = guard.servers["timers"]
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("schedule", {"action": "signal", "pid": host.pid}, task=TASK)
        tried = await _between(guard, lambda r: _signals(r, host.pid))
        (sig,) = _signals(tried, host.pid)
        assert sig.result < 0 and sig.delivered == 0  # not in its pid namespace: refused
        assert "process-control" not in tried.rules, tried.violations
        assert host.poll() is None, (host.returncode, sig)  # alive

        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("schedule", {"action": "signal-service"}, task=TASK)
        ended = await _between(guard, lambda r: "process-control" in r.rules)
        (v,) = [v for v in ended.violations if v.rule == "process-control"]
        assert v.mode == "enforce" and ended.decision == "deny"
        assert any("sleep" in e for e in v.evidence), v.evidence
        assert sup.quarantined is None  # control, not confidentiality: alerted only
        with anyio.fail_after(CALL_BOUND_S):
            out = await server.call_tool("held", {}, task=TASK)
        assert "exit -15" in out["content"][0]["text"]


def _signals(r: AuditRecord, pid: int) -> list[SignalEvent]:
    if r.tree is None:
        return []
    return [s for p in r.tree.processes for s in p.signals if s.target_pid == pid]
