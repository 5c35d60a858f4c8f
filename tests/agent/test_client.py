"""`RemoteProgram` against a scripted agent end (a socketpair): no root, no BPF."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mtguard_rt.agent.client import RemoteProgram
from mtguard_rt.agent.protocol import TAG_EVENT, TAG_REPLY, Reply, encode, request_decoder
from mtguard_rt.errors import MonitorLost
from mtguard_rt.monitor.decode import RawEvent


def ev(n: int) -> RawEvent:
    return RawEvent(ts_ns=n, cgroup_id=7, kind=1, pid=n)


def test_events_around_a_reply_all_reach_the_sink_in_order() -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(encode(TAG_REPLY, Reply(value={"pid": 42, "load_ms": 1500.0})))
    program = RemoteProgram(ours, Path("/x"))
    assert program.agent_pid == 42 and program.load_s == 1.5
    got: list[RawEvent] = []
    program.set_sink(lambda raw: got.append(program.decoder.decode(raw)))
    theirs.sendall(
        encode(TAG_EVENT, ev(1)) + encode(TAG_REPLY, Reply()) + encode(TAG_EVENT, ev(2))
    )
    program.add_cgroup(7, eager=True)
    assert [e.ts_ns for e in got] == [1, 2]  # the one after the reply is not left behind
    theirs.recv(1 << 16)  # what we asked: hello, then add_cgroup
    theirs.sendall(encode(TAG_REPLY, Reply(value=["rel"])))
    assert program.protect(7, {"rel": 1, "/abs": 2}) == ["rel"]
    sent = theirs.recv(1 << 16)
    req = request_decoder.decode(sent[5:])
    assert req.op == "protect" and req.paths == {"rel": 1, "/abs": 2}
    theirs.sendall(encode(TAG_REPLY, Reply(ok=False, error="cgroup 8 is not watched")))
    with pytest.raises(MonitorLost, match="refused actions: cgroup 8"):
        program.actions(8, "/abs")
    theirs.close()
    with pytest.raises(MonitorLost, match="the agent at /x is gone"):
        program.drops()
    assert program.gone
    program.remove_cgroup(7)  # moot once the agent is gone: it gave the cgroup back itself
    program.wire_forget(7)
    program.close()


def test_lost_is_asked_of_an_agent_that_counts_it_and_unknown_from_one_that_does_not() -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(encode(TAG_REPLY, Reply(value={"pid": 1, "load_ms": 1.0, "lost": True})))
    program = RemoteProgram(ours, Path("/x"))
    theirs.recv(1 << 16)  # the hello
    theirs.sendall(encode(TAG_REPLY, Reply(value={"open_write": 3, "exec": 1})))
    assert program.lost(7) == {"open_write": 3, "exec": 1}
    req = request_decoder.decode(theirs.recv(1 << 16)[5:])
    assert req.op == "lost" and req.cgroup_id == 7
    program.close()
    theirs.close()

    ours, theirs = socket.socketpair()  # an older agent: the window's losses stay unknown
    theirs.sendall(encode(TAG_REPLY, Reply(value={"pid": 1, "load_ms": 1.0})))
    program = RemoteProgram(ours, Path("/x"))
    assert program.lost(7) is None
    program.close()
    theirs.close()
