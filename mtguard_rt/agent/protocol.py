"""The agent's wire: length-prefixed frames of msgpack over a unix stream socket.

A frame is a 4-byte big-endian length, then a 1-byte tag, then the payload (the length
counts both). Tags: `Q` a `Request` (guard -> agent), `R` its `Reply` (in order, one per
request), `E` one `RawEvent` of a cgroup the connection watches, `M` a `CallReport` (guard ->
agent, no reply: the figures the agent's metrics count). Events and replies share the
connection in the agent's order, so a `sync` reply follows every event read before it.
`session_*` requests (join, tools, call, read) reach the agent's `SessionStore`.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import msgspec

from ..monitor.decode import RawEvent

TAG_REQUEST, TAG_REPLY, TAG_EVENT, TAG_REPORT = b"Q", b"R", b"E", b"M"
MAX_FRAME = 16 << 20  # a request or reply this big is a bug or an attack: the peer is cut
_LEN = struct.Struct(">I")


class Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    op: str  # hello status stop sync drops lost add_cgroup remove_cgroup protect actions ...
    cgroup_id: int = 0
    eager: bool = False
    paths: dict[str, int] = msgspec.field(default_factory=dict)
    path: str = ""
    fds: list[tuple[int, int, int]] = msgspec.field(default_factory=list)  # pid, fd, stream
    session: str = ""  # session_* requests: the session's name (agent/sessions.py)
    value: Any = None  # session_* requests: what is published or read


class CallReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One audited call, as the agent's metrics count it (no arguments, no content)."""

    server: str
    decision: str  # allow | deny
    mode: str  # enforce | observe
    # (rule, phase, mode) of each violation
    violations: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    kills: list[str] = msgspec.field(default_factory=list)  # per killed process: what decided
    rollback: str = ""  # the rollback's action, when one ran
    between: bool = False  # a between-call record (no call was in flight), not a call
    stages_ms: dict[str, float] = msgspec.field(default_factory=dict)  # pre settle post total


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    ok: bool = True
    value: Any = None
    error: str = ""


_enc = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(Request)
reply_decoder = msgspec.msgpack.Decoder(Reply)
event_decoder = msgspec.msgpack.Decoder(RawEvent)
report_decoder = msgspec.msgpack.Decoder(CallReport)


def frame(tag: bytes, payload: bytes) -> bytes:
    return _LEN.pack(len(payload) + 1) + tag + payload


def encode(tag: bytes, obj: msgspec.Struct) -> bytes:
    return frame(tag, _enc.encode(obj))


class FrameBuffer:
    """Bytes in, whole frames out (`(tag, payload)`), a partial frame kept for later."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def frames(self) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        buf, pos = self._buf, 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n < 1 or n > MAX_FRAME:
                raise ValueError(f"bad frame length {n}")
            if len(buf) - pos - 4 < n:
                break
            start = pos + 4
            out.append((bytes(buf[start : start + 1]), bytes(buf[start + 1 : start + n])))
            pos = start + n
        del buf[:pos]
        return out


def agent_socket_path() -> Path:
    """$MTGUARD_AGENT_SOCKET, else /run/mtguard/agent.sock as root, else the user's
    $XDG_RUNTIME_DIR/mtguard/agent.sock."""
    env = os.environ.get("MTGUARD_AGENT_SOCKET")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/mtguard/agent.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return Path(runtime) / "mtguard" / "agent.sock"
