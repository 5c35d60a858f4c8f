"""The kernel's view of a signal's targets (EV_SIGNAL a1 >> 48) placed against the tree, and
the BTF offsets the C reads a task with. Pure logic: recorded-shape records, synthetic BTF."""

from __future__ import annotations

import struct

from mtguard_rt.model import ProcessNode
from mtguard_rt.monitor.btf import FIELDS, parse_offsets, task_offsets
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import SIG_KILL, SIG_TARGETS, Kind
from mtguard_rt.monitor.signals import signal_event

SENDER = ProcessNode(key="10@1", pid=10, ppid=1, exe="/bin/srv", start_ns=1)
CHILD = ProcessNode(key="11@2", pid=11, ppid=10, parent="10@1", exe="/bin/w", start_ns=2)


def view(same: int = 0, known: int = 0, ignored: int = 0, beyond: bool = False) -> int:
    """a1's view bits: per target i, bit i of each mask (monitor.bpf.c's sig_generated)."""
    bits = same | known << SIG_TARGETS | ignored << 2 * SIG_TARGETS
    return (bits | (1 << 3 * SIG_TARGETS if beyond else 0)) << 48


def kill(targets: list[int], a1: int, count: int | None = None, pid: int = 10) -> RawEvent:
    n = len(targets) if count is None else count
    tgids = struct.pack(f"<{SIG_TARGETS}I", *(targets + [0] * (SIG_TARGETS - len(targets))))
    return RawEvent(ts_ns=5, cgroup_id=7, kind=int(Kind.SIGNAL), pid=pid, a0=-pid, a1=a1,
                    a2=15, a3=SIG_KILL | n << 8 | targets[0] << 32, addr=tgids,
                    s1=b"w\0")  # fmt: skip


def place(ev: RawEvent, *nodes: ProcessNode) -> tuple[str, str | None, list[str]]:
    by_pid = {n.pid: n for n in (SENDER, *nodes)}
    sig = signal_event(ev, SENDER, by_pid.get, start_ns=3)
    return sig.relation, sig.target_key, sig.more_targets


def test_without_the_kernels_view_a_target_the_tree_lacks_is_outside() -> None:
    assert place(kill([99], 0)) == ("outside", None, [])
    assert place(kill([11], 0), CHILD)[0] == "descendant"


def test_a_target_the_kernel_found_in_the_senders_cgroup_is_never_outside() -> None:
    # gone before the tree was read (or never seen by it): a process of the sandbox
    assert place(kill([99], view(same=1, known=1)))[0] == "sandbox"
    # ... and one whose signal the kernel ignored (it was dying): no effect
    assert place(kill([99], view(same=1, known=1, ignored=1)))[0] == "unknown"
    assert place(kill([11], view(same=1, known=1)), CHILD)[:2] == ("descendant", "11@2")


def test_the_kernels_other_cgroup_wins_over_a_pid_the_tree_knows() -> None:
    # the tree's pid 11 exited and its number now names a process elsewhere
    assert place(kill([11], view(known=1)), CHILD) == ("outside", None, [])
    # a group: one of ours, one elsewhere; the one elsewhere names the relation
    rel, key, more = place(kill([11, 99], view(same=0b01, known=0b11)), CHILD)
    assert (rel, key, more) == ("outside", None, ["11@2"])


def test_a_target_past_those_the_record_names_outside_the_cgroup_is_outside() -> None:
    ev = kill([11, 11, 11, 11], view(same=0xF, known=0xF, beyond=True), count=6)
    rel, key, more = place(ev, CHILD)
    assert rel == "outside" and key is None
    assert more[-1] == f"a target past the first {SIG_TARGETS}, outside the sandbox"
    sig = signal_event(ev, SENDER, {11: CHILD}.get, start_ns=0)
    assert sig.target_host_pid is None and not sig.started_in_call


# -- BTF ---------------------------------------------------------------------------------


def btf_blob(structs: dict[str, list[tuple[str, int, int]]], unions: int = 0) -> bytes:
    """A minimal BTF: an int, then each struct's members (name, type id, bit offset)."""
    strs = bytearray(b"\0")

    def name(s: str) -> int:
        if not s:
            return 0
        at = len(strs)
        strs.extend(s.encode() + b"\0")
        return at

    types = bytearray(struct.pack("<IIII", name("int"), 1 << 24, 4, 32))  # id 1: INT
    for sname, members in structs.items():
        kind = 5 if sname.startswith("anon") else 4
        types += struct.pack("<III", 0 if kind == 5 else name(sname), kind << 24 | len(members), 8)
        for mname, mtype, bits in members:
            types += struct.pack("<III", name(mname), mtype, bits)
    hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strs))
    return hdr + bytes(types) + bytes(strs)


def test_offsets_come_from_the_kernels_types_through_anonymous_members() -> None:
    structs = {
        "anon_u": [("pid", 1, 0), ("tgid", 1, 32)],  # id 2: a union inside task_struct
        "task_struct": [("state", 1, 0), ("", 2, 64), ("comm", 1, 256), ("cgroups", 1, 512)],
        "css_set": [("dfl_cgrp", 1, 96 * 8)],
        "cgroup": [("kn", 1, 7 * 8)],
        "kernfs_node": [("id", 1, 12 * 8)],
    }
    offs = parse_offsets(btf_blob(structs))
    assert offs == {
        "BTF_TASK_PID": 8, "BTF_TASK_TGID": 12, "BTF_TASK_COMM": 32, "BTF_TASK_CGROUPS": 64,
        "BTF_CSS_SET_DFL_CGRP": 96, "BTF_CGROUP_KN": 7, "BTF_KERNFS_NODE_ID": 12,
    }  # fmt: skip
    del structs["kernfs_node"]  # one field missing: none is trusted
    assert set(parse_offsets(btf_blob(structs)).values()) == {-1}
    assert set(parse_offsets(b"not btf at all, not at all").values()) == {-1}


def test_the_running_kernels_offsets_are_all_found() -> None:
    offs = task_offsets()
    assert set(offs) == {name for name, _s, _m in FIELDS}
    assert all(v > 0 for v in offs.values()) or set(offs.values()) == {-1}
    if offs["BTF_TASK_PID"] > 0:
        assert offs["BTF_TASK_TGID"] == offs["BTF_TASK_PID"] + 4  # pid_t pid; pid_t tgid;
