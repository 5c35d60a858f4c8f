"""Reassemble the kernel's EV_STDIO records into the JSON-RPC messages a server exchanged.

MCP's stdio framing is one JSON-RPC message per line. Records arrive per (pid, stream) in
syscall order, each a chunk of one read/write (`a1` offset, `a2` the syscall's byte count);
`StdioAssembler` joins them into lines and parses each. Nothing in the input can make it
raise: non-UTF-8, non-JSON and non-object lines are counted; a line with a gap (a syscall
cut at the kernel's cap, a lost or unreadable chunk) or longer than `MAX_MESSAGE_BYTES` is
kept as a digest of its captured bytes, marked `truncated`, and the capture `unverified`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ..model import StdioCapture, StdioMessage, call_digest, canonical_digest
from .decode import RawEvent
from .kinds import IO_CAP, WIRE_STDIN, Flag

MAX_MESSAGE_BYTES = 4 << 20  # longer lines are digested, not parsed (reported unverified)
KEEP_ARGUMENTS_BYTES = 64 << 10  # tools/call arguments are copied into the tree up to this
F_TRUNC1, F_FAULT = int(Flag.TRUNC1), int(Flag.FAULT)

_decoder = msgspec.json.Decoder()


class _Stream:
    __slots__ = ("buf", "cut", "expect", "hasher", "size", "total", "ts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.hasher: Any = None  # sha256 of an overlong line's bytes (buf no longer kept)
        self.size = 0  # bytes of the current line so far
        self.cut = False  # the current line lost bytes
        self.expect = 0  # offset of the next chunk of the current syscall (0: none open)
        self.total = 0  # byte count of the current syscall
        self.ts = 0  # when the current line's first byte was seen


class StdioAssembler:
    """Feed EV_STDIO records in order (`feed`), then `capture()` the window's messages."""

    def __init__(self) -> None:
        self._streams: dict[tuple[int, int], _Stream] = {}
        self.requests: list[StdioMessage] = []
        self.responses: list[StdioMessage] = []
        self.notifications_out = 0
        self.garbage_lines = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.records = 0
        self._unverified: dict[str, None] = {}  # ordered set of reasons

    def _why(self, reason: str) -> None:
        self._unverified.setdefault(reason, None)

    def feed(self, ev: RawEvent) -> None:
        self.records += 1
        stream = 0 if ev.a0 == WIRE_STDIN else 1
        name = "stdin" if stream == 0 else "stdout"
        st = self._streams.get((ev.pid, stream))
        if st is None:
            st = self._streams[(ev.pid, stream)] = _Stream()
        data = ev.s1
        if ev.a1 == 0:  # a new syscall: was the previous one captured to its end?
            if st.expect and st.expect < min(st.total, IO_CAP):
                self._gap(st, f"a {name} chunk of pid {ev.pid} was lost")
            if ev.a2 > 0:
                if stream == 0:
                    self.bytes_in += ev.a2
                else:
                    self.bytes_out += ev.a2
        elif ev.a1 != st.expect:
            self._gap(st, f"a {name} chunk of pid {ev.pid} was lost")
        st.total = ev.a2
        st.expect = ev.a1 + len(data)
        if ev.flags & F_FAULT:
            self._gap(st, f"pid {ev.pid}'s {name} buffer was unreadable")
        self._bytes(st, stream, ev.pid, ev.ts_ns, data)
        vec_cut = bool(ev.flags & F_TRUNC1) and st.total <= IO_CAP  # readv/writev: cut here
        if vec_cut or st.expect >= min(st.total, IO_CAP):  # the syscall's last record
            if ev.flags & F_TRUNC1:
                self._gap(
                    st,
                    f"a {name} {'read' if stream == 0 else 'write'} of pid {ev.pid} moved "
                    f"{st.total} bytes; only the first {st.expect} were captured",
                )
            st.expect = 0

    def _gap(self, st: _Stream, reason: str) -> None:
        st.cut = True
        self._why(reason)

    def _bytes(self, st: _Stream, stream: int, pid: int, ts: int, data: bytes) -> None:
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            if piece and st.size == 0:
                st.ts = ts
            if piece:
                st.size += len(piece)
                if st.hasher is not None:
                    st.hasher.update(piece)
                else:
                    st.buf += piece
                    if st.size > MAX_MESSAGE_BYTES:
                        st.hasher = hashlib.sha256(st.buf)
                        st.buf = bytearray()
            if end < 0:
                return
            self._line(st, stream, pid, ts)
            start = end + 1

    def _line(self, st: _Stream, stream: int, pid: int, ts: int) -> None:
        line, size, cut, hasher = bytes(st.buf), st.size, st.cut, st.hasher
        first_ts = st.ts or ts
        st.buf, st.size, st.cut, st.hasher, st.ts = bytearray(), 0, False, None, 0
        if cut or hasher is not None:
            digest = (hasher or hashlib.sha256(line)).hexdigest()
            if hasher is not None:
                self._why(f"a {size}-byte message is over {MAX_MESSAGE_BYTES}: digested only")
            msg = StdioMessage(
                ts_ns=first_ts, pid=pid, digest=f"raw-sha256:{digest}", size=size, truncated=True
            )
            (self.requests if stream == 0 else self.responses).append(msg)
            return
        if not line.strip():
            return
        try:
            obj = _decoder.decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError, ValueError):
            self.garbage_lines += 1
            return
        if not isinstance(obj, dict):
            self.garbage_lines += 1
            return
        try:
            self._message(obj, stream, pid, first_ts, size)
        except Exception:  # a hostile shape (e.g. an unhashable id) is garbage, never a crash
            self.garbage_lines += 1

    def _message(self, obj: dict[str, Any], stream: int, pid: int, ts: int, size: int) -> None:
        rid = obj.get("id")
        if not isinstance(rid, str | int | float) or isinstance(rid, bool):
            rid = None  # not a JSON-RPC id (null, an object, a boolean)
        method = obj.get("method")
        if stream == 0:
            if not isinstance(method, str):
                return  # the client's answer to a server request: not a call
            params = obj.get("params")
            msg = StdioMessage(ts_ns=ts, pid=pid, method=method, id=rid, size=size)
            if method == "tools/call" and isinstance(params, dict):
                name = params.get("name")
                arguments = params.get("arguments") or {}
                msg.tool = name if isinstance(name, str) else repr(name)
                msg.digest = call_digest(msg.tool, arguments)
                if size <= KEEP_ARGUMENTS_BYTES:
                    msg.arguments = arguments
            else:
                msg.digest = canonical_digest(params)
            self.requests.append(msg)
            return
        if method is not None or rid is None:
            self.notifications_out += 1
            return
        is_error = "error" in obj and "result" not in obj
        body = obj.get("error") if is_error else (obj.get("result") or {})  # as the guard does
        self.responses.append(
            StdioMessage(
                ts_ns=ts, pid=pid, id=rid, digest=canonical_digest(body), size=size, error=is_error
            )
        )

    def capture(self, lost: str | None = None) -> StdioCapture:
        """The window's capture. `lost`: why records of the window may be missing (ring
        buffer drops, window overflow): then nothing captured can be trusted whole."""
        for (pid, stream), st in self._streams.items():
            name = "stdin" if stream == 0 else "stdout"
            if st.expect:
                self._why(f"a {name} chunk of pid {pid} was lost")
            if st.size:
                self._why(f"pid {pid} left a partial {st.size}-byte {name} line at window end")
        if lost:
            self._why(lost)
        return StdioCapture(
            requests=self.requests,
            responses=self.responses,
            notifications_out=self.notifications_out,
            garbage_lines=self.garbage_lines,
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            unverified=list(self._unverified),
            lossy=bool(lost),
        )
