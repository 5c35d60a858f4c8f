"""The agent's frames and socket path: no root, no BPF."""

from __future__ import annotations

import pytest

from mtguard_rt.agent.protocol import (
    TAG_EVENT,
    TAG_REPLY,
    FrameBuffer,
    Reply,
    agent_socket_path,
    encode,
    event_decoder,
    frame,
    reply_decoder,
)
from mtguard_rt.monitor.decode import RawEvent


def test_frames_survive_any_cut() -> None:
    ev = RawEvent(ts_ns=5, cgroup_id=77, kind=3, pid=9, s1=b"/etc/passwd\0x")
    wire = encode(TAG_REPLY, Reply(value={"pid": 1})) + frame(TAG_EVENT, b"") + (
        encode(TAG_EVENT, ev)
    )
    for cut in range(len(wire) + 1):
        buf = FrameBuffer()
        buf.feed(wire[:cut])
        got = buf.frames()
        buf.feed(wire[cut:])
        got += buf.frames()
        assert [t for t, _ in got] == [TAG_REPLY, TAG_EVENT, TAG_EVENT]
        assert reply_decoder.decode(got[0][1]).value == {"pid": 1}
        assert got[1][1] == b""
        assert event_decoder.decode(got[2][1]) == ev


def test_a_bad_length_is_refused() -> None:
    buf = FrameBuffer()
    buf.feed(b"\xff\xff\xff\xffQ")
    with pytest.raises(ValueError, match="bad frame length"):
        buf.frames()


def test_socket_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", "/tmp/x/agent.sock")
    assert str(agent_socket_path()) == "/tmp/x/agent.sock"
    monkeypatch.delenv("MTGUARD_AGENT_SOCKET")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert str(agent_socket_path()) == "/run/mtguard/agent.sock"
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr("os.getuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert str(agent_socket_path()) == "/run/user/1000/mtguard/agent.sock"
