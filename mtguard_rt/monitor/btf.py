"""Field offsets of a few kernel structs, read from the running kernel's BTF.

The BPF C is compiled against older headers than the kernel (DESIGN: never read a struct
field at a header's offset). The few fields the signals block reads from a signalled task
(its pid, tgid, comm and cgroup: task_struct -> css_set -> cgroup -> kernfs_node id) are
located here in /sys/kernel/btf/vmlinux and handed to the C as -D constants; without BTF,
or if a field is missing, `task_offsets()` says so (-1) and the C keeps the tracepoint's
own fields (no cgroup: user space places targets as before).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

VMLINUX = Path("/sys/kernel/btf/vmlinux")
BTF_MAGIC = 0xEB9F
_HEADER = struct.Struct("<HBBIIIII")
_TYPE = struct.Struct("<III")
KIND_STRUCT, KIND_UNION = 4, 5
# bytes after a type's 12-byte header: fixed, and per vlen entry (linux/btf.h kinds)
_EXTRA = {1: 4, 3: 12, 14: 4, 17: 4}
_PER_ENTRY = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}
# (-D name, struct, member): the fields the signals block reads
FIELDS = (
    ("BTF_TASK_PID", "task_struct", "pid"),
    ("BTF_TASK_TGID", "task_struct", "tgid"),
    ("BTF_TASK_COMM", "task_struct", "comm"),
    ("BTF_TASK_CGROUPS", "task_struct", "cgroups"),
    ("BTF_CSS_SET_DFL_CGRP", "css_set", "dfl_cgrp"),
    ("BTF_CGROUP_KN", "cgroup", "kn"),
    ("BTF_KERNFS_NODE_ID", "kernfs_node", "id"),
)


class _Btf:
    def __init__(self, raw: bytes) -> None:
        magic, _ver, _flags, hdr_len, toff, tlen, soff, slen = _HEADER.unpack_from(raw)
        if magic != BTF_MAGIC:
            raise ValueError("not BTF")
        self.types = raw[hdr_len + toff : hdr_len + toff + tlen]
        self.strs = raw[hdr_len + soff : hdr_len + soff + slen]
        self._pos: list[int] | None = None  # type id -> its header's offset, if needed

    @property
    def pos(self) -> list[int]:
        """Every type's header offset by id (id 0: void), built on first use (only an
        anonymous member needs it)."""
        if self._pos is None:
            self._pos = [0]
            pos, types, unpack = 0, self.types, _TYPE.unpack_from
            while pos < len(types):
                self._pos.append(pos)
                _name, info, _size = unpack(types, pos)
                kind = (info >> 24) & 0x1F
                pos += 12 + _EXTRA.get(kind, 0) + _PER_ENTRY.get(kind, 0) * (info & 0xFFFF)
        return self._pos

    def name(self, off: int) -> str:
        return self.strs[off : self.strs.index(b"\0", off)].decode()

    def structs(self, wanted: set[str]) -> dict[str, tuple[int, int]]:
        """name -> (type id, header offset) of the first complete struct of each name."""
        offs = {}
        for name in wanted:
            at = self.strs.find(b"\0" + name.encode() + b"\0")
            if at >= 0:
                offs[at + 1] = name
        found: dict[str, tuple[int, int]] = {}
        pos, types, tid, unpack = 0, self.types, 0, _TYPE.unpack_from
        extra, per = _EXTRA.get, _PER_ENTRY.get
        while pos < len(types):  # inline: a call per type would double the time
            tid += 1
            name_off, info, _size = unpack(types, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            if name_off in offs and kind == KIND_STRUCT and vlen:
                found.setdefault(offs[name_off], (tid, pos))
            pos += 12 + extra(kind, 0) + per(kind, 0) * vlen
        return found

    def members(self, pos: int) -> Iterator[tuple[str, int, int]]:
        """(name, type id, byte offset) of the members of the struct or union at `pos`."""
        _n, info, _s = _TYPE.unpack_from(self.types, pos)
        bitfields = info >> 31
        for k in range(info & 0xFFFF):
            name_off, mtype, off = _TYPE.unpack_from(self.types, pos + 12 + 12 * k)
            bits = off & 0xFFFFFF if bitfields else off
            yield self.name(name_off), mtype, bits // 8

    def offset(self, pos: int, member: str, depth: int = 0) -> int | None:
        """A member's byte offset, looking into anonymous struct/union members."""
        for name, mtype, off in self.members(pos):
            if name == member:
                return off
            if not name and depth < 4:
                inner = self._composite(mtype)
                if inner is not None:
                    sub = self.offset(self.pos[inner], member, depth + 1)
                    if sub is not None:
                        return off + sub
        return None

    def _composite(self, tid: int) -> int | None:
        for _ in range(8):  # through const/volatile/typedef to a struct or union
            if not 0 < tid < len(self.pos):
                return None
            _n, info, size_type = _TYPE.unpack_from(self.types, self.pos[tid])
            kind = (info >> 24) & 0x1F
            if kind in (KIND_STRUCT, KIND_UNION):
                return tid
            if kind not in (8, 9, 10, 11, 18):
                return None
            tid = size_type
        return None


def parse_offsets(raw: bytes) -> dict[str, int]:
    """-D name -> byte offset for `FIELDS`; all -1 when any one cannot be found."""
    missing = {name: -1 for name, _s, _m in FIELDS}
    try:
        btf = _Btf(raw)
        ids = btf.structs({s for _n, s, _m in FIELDS})
        out = {}
        for name, struct_name, member in FIELDS:
            off = btf.offset(ids[struct_name][1], member) if struct_name in ids else None
            if off is None:
                return missing
            out[name] = off
        return out
    except (ValueError, struct.error, IndexError, UnicodeDecodeError):
        return missing


@lru_cache(maxsize=1)
def task_offsets() -> dict[str, int]:
    """The running kernel's offsets (read once per process, ~0.1 s)."""
    try:
        raw = VMLINUX.read_bytes()
    except OSError:
        return {name: -1 for name, _s, _m in FIELDS}
    return parse_offsets(raw)
