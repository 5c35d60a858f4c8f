"""Raw ring-buffer records -> `RawEvent`, plus JSON Lines fixtures of them.

The header layout is derived once from bcc's generated ctypes view of `struct event`
(field names and offsets), never from a hand-written mirror; decoding a record is then one
`struct.unpack_from`, fast enough for the reader's hot path. `RawEvent` is what the tree
builder consumes, so a `Recording` replays a window exactly, without root.
"""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path
from typing import Any

import msgspec

from ..model import DeclaredCall
from .kinds import ARG_MAX, Kind
from .procfs import SeedProcess

HEADER_FIELDS = (
    "ts_ns",
    "cgroup_id",
    "ret",
    "a0",
    "a1",
    "a2",
    "a3",
    "pid",
    "tid",
    "uid",
    "kind",
    "flags",
    "len1",
    "len2",
    "addr",
)
"""Every header field the decoder reads; `data` follows them."""

_CODES: dict[Any, str] = {
    ctypes.c_ulonglong: "Q",
    ctypes.c_longlong: "q",
    ctypes.c_uint: "I",
    ctypes.c_int: "i",
    ctypes.c_ushort: "H",
    ctypes.c_short: "h",
}


K_EXEC, K_DNS_SEND, K_DNS_RECV = int(Kind.EXEC), int(Kind.DNS_SEND), int(Kind.DNS_RECV)
K_STDIO = int(Kind.STDIO)  # raw bytes: never cut at a NUL
# str1 is binary (a DNS payload, stdio bytes, NET_SENT's u64 byte count, an AF_UNIX
# connect's sun_path: abstract names start with a NUL): never cut at a NUL
RAW_KINDS = frozenset(
    {int(Kind.DNS_SEND), int(Kind.DNS_RECV), K_STDIO, int(Kind.NET_SENT), int(Kind.CONNECT)}
)


class RawEvent(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """One kernel record. `s1`/`s2` are the variable strings (argv NUL-joined for EXEC)."""

    ts_ns: int
    cgroup_id: int
    kind: int
    pid: int
    tid: int = 0
    uid: int = 0
    ret: int = 0
    a0: int = 0
    a1: int = 0
    a2: int = 0
    a3: int = 0
    flags: int = 0
    addr: bytes = b""
    s1: bytes = b""
    s2: bytes = b""


def header_format(event_class: type[ctypes.Structure]) -> tuple[struct.Struct, int]:
    """A little-endian `struct.Struct` for the header, and the offset of `data`."""
    fields = {f[0]: (getattr(event_class, f[0]), f[1]) for f in event_class._fields_}
    missing = [name for name in (*HEADER_FIELDS, "data") if name not in fields]
    if missing:
        raise ValueError(f"struct event lacks fields {missing}")
    fmt, pos = "<", 0
    for name in HEADER_FIELDS:
        descr, ctype = fields[name]
        if descr.offset > pos:
            fmt += f"{descr.offset - pos}x"
        if name == "addr":
            fmt += f"{descr.size}s"
        else:
            fmt += _CODES[ctype]
        pos = descr.offset + descr.size
    data_off = fields["data"][0].offset
    return struct.Struct(fmt), data_off


class EventDecoder:
    """Decodes raw record bytes with a layout taken from bcc's ctypes class."""

    def __init__(self, event_class: type[ctypes.Structure]) -> None:
        self._header, self._data_off = header_format(event_class)

    def decode(self, raw: bytes) -> RawEvent:
        (ts, cg, ret, a0, a1, a2, a3, pid, tid, uid, kind, flags, len1, len2, addr) = (
            self._header.unpack_from(raw)
        )
        off = self._data_off
        s1 = raw[off : off + len1]
        s2 = raw[off + len1 : off + len1 + len2]
        if kind == K_EXEC:
            s1 = s1.split(b"\0", 1)[0]
            s2 = b"\0".join(
                s2[i : i + ARG_MAX].split(b"\0", 1)[0] for i in range(0, len(s2), ARG_MAX)
            )
        elif kind not in RAW_KINDS:
            s1 = s1.split(b"\0", 1)[0]
            s2 = s2.split(b"\0", 1)[0]
        return RawEvent(
            ts_ns=ts,
            cgroup_id=cg,
            kind=kind,
            pid=pid,
            tid=tid,
            uid=uid,
            ret=ret,
            a0=a0,
            a1=a1,
            a2=a2,
            a3=a3,
            flags=flags,
            addr=addr,
            s1=s1,
            s2=s2,
        )


class Recording(msgspec.Struct, kw_only=True):
    """A window's inputs: the call, its start, the seeded snapshot and every event."""

    call: DeclaredCall
    start_ns: int
    seeds: list[SeedProcess]
    events: list[RawEvent]


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Recording)


def save_recording(rec: Recording, path: Path) -> None:
    path.write_bytes(_enc.encode(rec) + b"\n")


def load_recording(path: Path) -> Recording:
    return _dec.decode(path.read_bytes())
