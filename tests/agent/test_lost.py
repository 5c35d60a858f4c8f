"""The agent's per-cgroup losses (no root, no BPF): the kernel's count of a cgroup plus what
the agent's bounded queue shed of that cgroup's records, by kind, to its owner only."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from mtguard_rt.agent import server
from mtguard_rt.agent.protocol import Request
from mtguard_rt.agent.server import Agent, Connection, lost_name
from mtguard_rt.errors import GuardError
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Kind


class _Program:
    def __init__(self) -> None:
        self.kernel: dict[int, dict[str, int]] = {5: {"exec": 2}}
        self.decoder = cast(Any, None)

    def lost(self, cgroup_id: int) -> dict[str, int]:
        return dict(self.kernel.get(cgroup_id, {}))

    def add_cgroup(self, cgroup_id: int, eager: bool = False) -> None:
        pass

    def remove_cgroup(self, cgroup_id: int) -> None:
        self.kernel.pop(cgroup_id, None)

    def unprotect(self, cgroup_id: int) -> None:
        pass

    def wire_forget(self, cgroup_id: int) -> None:
        pass


def test_lost_names_follow_the_kernel_count() -> None:
    assert lost_name(int(Kind.OPEN), 0o1) == "open_write"  # O_WRONLY
    assert lost_name(int(Kind.OPEN), 0o0) == "open"
    assert lost_name(int(Kind.EXEC), 0) == "exec"
    assert lost_name(250, 0) == "kind_250"


def test_a_cgroups_losses_are_the_kernels_plus_what_its_queue_shed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server, "MAX_BACKLOG", 10)  # a tiny queue: the second event is shed
    program = _Program()
    agent = Agent(cast(Any, program), Path("/x"))
    a = Connection(agent, cast(Any, None), 1, 0)
    b = Connection(agent, cast(Any, None), 2, 0)
    agent.handle(a, Request(op="add_cgroup", cgroup_id=5))
    agent.handle(b, Request(op="add_cgroup", cgroup_id=6))
    agent._encode = lambda ev: b"x" * 20
    program.decoder = cast(Any, type("D", (), {"decode": staticmethod(lambda raw: raw)}))
    for ev in (
        RawEvent(ts_ns=1, cgroup_id=5, kind=int(Kind.OPEN), pid=1, a1=0o1101),
        RawEvent(ts_ns=2, cgroup_id=5, kind=int(Kind.OPEN), pid=1, a1=0o1101),
        RawEvent(ts_ns=3, cgroup_id=5, kind=int(Kind.CONNECT), pid=1),
    ):
        agent._on_record(cast(Any, ev))
    assert a.events == 1 and a.lost == 2
    assert agent.handle(a, Request(op="lost", cgroup_id=5)) == {
        "exec": 2, "open_write": 1, "connect": 1
    }  # fmt: skip
    assert agent.handle(b, Request(op="lost", cgroup_id=6)) == {}  # its neighbour's are not its
    with pytest.raises(GuardError):
        agent.handle(b, Request(op="lost", cgroup_id=5))  # nor may it ask for them
    agent.handle(a, Request(op="remove_cgroup", cgroup_id=5))
    agent.handle(a, Request(op="add_cgroup", cgroup_id=5))  # watched again: counted from 0
    assert agent.handle(a, Request(op="lost", cgroup_id=5)) == {}
