"""Lost events through a real agent (root, eBPF, Docker): `mtguard agent run` with a 16-page
ring (64 KiB) serves library guards in enforce mode. A call that floods writing opens sheds
records of its own sandbox in the agent's kernel ring; the guard asks the agent for its
cgroup's losses per kind (`lost`) as the in-process monitor reads them, and `lost-events`
denies the call (its result withheld), while a small call on the same ring is allowed. A
flood between calls (a server's own timer, after its call answered) is a between-call record
that says so, and it quarantines the server: the next call is refused."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from tests.audit_records import last_call

from ..e2e.conftest import SERVERS, online_guard_config
from ..e2e.test_between_quarantine import HERE, TIMERS, _between
from ..e2e.test_lost_events import TASK, small_allowed_flood_denied

pytestmark = [
    pytest.mark.root, pytest.mark.bpf, pytest.mark.docker, pytest.mark.anyio,
    pytest.mark.timeout(600),  # the agent's compile (AGENT_START_S) and two bounded calls
]  # fmt: skip

MTGUARD = str(Path(sys.executable).parent / "mtguard")
AGENT_START_S = 240  # one bcc compile on a loaded 2-core host (10-15 s quiet)
CALL_BOUND_S = 90.0
RING_PAGES = 16


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # one backend: the agent's compile is the cost


@pytest.fixture(scope="module")
def small_ring_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`mtguard agent run` with a small ring, the guards of this module pointed at it."""
    tmp = tmp_path_factory.mktemp("agent")
    sock = tmp / "run" / "agent.sock"
    with (tmp / "agent.err").open("w") as errlog, pytest.MonkeyPatch.context() as monkeypatch:
        agent = subprocess.Popen(
            [MTGUARD, "agent", "run", "--socket", str(sock), "--ring-pages", str(RING_PAGES)],
            stdout=subprocess.PIPE, stderr=errlog, text=True,
        )  # fmt: skip
        try:
            assert agent.stdout is not None
            ready, _, _ = select.select([agent.stdout], [], [], AGENT_START_S)
            line = agent.stdout.readline() if ready else ""
            assert "serving at" in line, (line, agent.poll())
            monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))
            monkeypatch.setenv("MTGUARD_AGENT", "on")
            yield sock
        finally:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
                try:
                    agent.wait(30)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait(10)
            if agent.stdout is not None:
                agent.stdout.close()


async def test_a_flood_through_the_agent_is_denied_for_its_lost_records(
    tmp_path: Path, small_ring_agent: Path
) -> None:
    config = online_guard_config(tmp_path, "enforce")
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="fl") as server:
        assert guard.monitor_mode.startswith("monitor: agent"), guard.monitor_mode
        await small_allowed_flood_denied(guard, server, CALL_BOUND_S)


async def test_a_flood_between_calls_through_the_agent_quarantines_the_server(
    tmp_path: Path, small_ring_agent: Path
) -> None:
    config = online_guard_config(tmp_path, "enforce")
    config.sandbox.mounts.append(str(HERE))
    async with open_guard(config) as guard, guard.connect(TIMERS, name="timers") as server:
        assert guard.monitor_mode.startswith("monitor: agent"), guard.monitor_mode
        with anyio.fail_after(CALL_BOUND_S):
            await server.call_tool("schedule", {"action": "flood", "delay_s": 0.5}, task=TASK)
        rec = last_call(guard.records)
        assert rec.decision == "allow", rec.violations
        rec = await _between(guard, lambda r: "lost-events" in r.rules)
        (v,) = [v for v in rec.violations if v.rule == "lost-events"]
        assert v.mode == "enforce" and rec.decision == "deny"
        assert rec.tree is not None and rec.tree.lost.get("open_write", 0) > 0, rec.tree.lost
        assert any("records lost between calls" in r for r in rec.tree.incomplete_reasons)
        sup = guard.servers["timers"]
        assert sup.quarantined == "lost-events between calls"
        with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
            await server.call_tool("held", {}, task=TASK)
        assert info.value.record is not None and info.value.record.rules == ["quarantined"]
