"""EV_SIGNAL records -> `SignalEvent`: who a process signalled, placed against the tree.

The kernel reports the targets it really signalled as global tgids (signal_generate, in the
sender's context); the sender passed pids of its own pid namespace. A target is the sender
itself (or one of its threads), a descendant of it, another process of the tree (the
sandbox), outside, or unknown (nothing was generated: a probe, a refused send, or a
thread the kernel's thread map did not know). Outside is the kernel's word where it has one:
each target's cgroup against the sender's as the signal was generated (`SGV_*` bits), so a
target that exits before the tree is read stays in its sandbox, a pid the tree knows but the
kernel found elsewhere (reused) is outside, and a sandbox process whose signal the kernel
ignored (it was dying) had no effect: unknown. Without the kernel's view (no BTF) a target
the tree does not know is outside. Signals are rare except runtimes that signal their own
threads: the `self` case costs one comparison.
"""

from __future__ import annotations

import signal as _signal
import struct
from collections.abc import Callable

from ..model import ProcessNode, SignalEvent, SignalRelation
from .decode import RawEvent
from .kinds import (
    SIG_PIDFD,
    SIG_SYSCALLS,
    SIG_TARGETS,
    SIG_TGKILL,
    SIG_TGQUEUE,
    SIG_TKILL,
)
from .paths import text

SIGNAL_NAMES = {int(v): v.name for v in _signal.Signals}
THREAD_SIGNALS = frozenset({SIG_TKILL, SIG_TGKILL, SIG_TGQUEUE})
_TGIDS = struct.Struct(f"<{SIG_TARGETS}I")
# the most distant target names a signal's relation (kill of a process group)
_DISTANCE: dict[SignalRelation, int] = {
    "unknown": 0,
    "self": 1,
    "descendant": 2,
    "sandbox": 3,
    "outside": 4,
}

NodeOf = Callable[[int], ProcessNode | None]  # a tgid -> its node in the tree being built
# a1 >> 48: target i's bit i (in the sender's cgroup), SIG_TARGETS + i (its cgroup was read),
# 2 * SIG_TARGETS + i (its signal ignored); 3 * SIG_TARGETS: a target past those kept was
# not in the sender's cgroup (monitor.bpf.c's sig_generated)
_VIEW_SHIFT = 48
_BEYOND = 1 << (3 * SIG_TARGETS)
KernelView = tuple[bool, bool] | None  # (in the sender's cgroup, ignored), None: no view


def kernel_view(a1: int, i: int) -> KernelView:
    """What the kernel saw of target i: None when it could not read the target's cgroup."""
    view = (a1 & 0xFFFF_FFFF_FFFF_FFFF) >> _VIEW_SHIFT
    if not view >> (SIG_TARGETS + i) & 1:
        return None
    return bool(view >> i & 1), bool(view >> (2 * SIG_TARGETS + i) & 1)


def beyond_outside(a1: int) -> bool:
    """A target past the first SIG_TARGETS was not in the sender's cgroup."""
    return bool((a1 & 0xFFFF_FFFF_FFFF_FFFF) >> _VIEW_SHIFT & _BEYOND)


def signal_name(sig: int) -> str:
    """`SIGTERM`, `SIGRTMIN+3`, `0` (a probe): the name a reader expects."""
    if sig == 0:
        return "0"
    name = SIGNAL_NAMES.get(sig)
    if name is not None:
        return name
    rtmin = int(_signal.SIGRTMIN)
    return f"SIGRTMIN+{sig - rtmin}" if sig > rtmin else f"signal {sig}"


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def signal_event(ev: RawEvent, sender: ProcessNode, node_of: NodeOf, start_ns: int) -> SignalEvent:
    """The record's `SignalEvent` (monitor.bpf.c's signals block has the field layout)."""
    code = ev.a3 & 0xFF
    count = (ev.a3 >> 8) & 0xFFFFFF
    tid_passed = _s32(ev.a1)
    thread = code in THREAD_SIGNALS
    sig = SignalEvent(
        ts_ns=ev.ts_ns,
        syscall=SIG_SYSCALLS.get(code, str(code)),
        signal=ev.a2,
        name=signal_name(ev.a2),
        target_pid=ev.a0,
        thread=thread,
        target_tid=tid_passed if code in (SIG_TGKILL, SIG_TGQUEUE) else None,
        pidfd=code == SIG_PIDFD,
        delivered=count,
        result=ev.ret,
    )
    if not count:
        return sig
    tgids = _TGIDS.unpack_from(ev.addr.ljust(_TGIDS.size, b"\0"))[: min(count, SIG_TARGETS)]
    first_tid = ev.a3 >> 32
    # a thread (not a main thread: tgkill's tid differs from its tgid) whose tgid the kernel
    # could not map reports its own tid: its process is unknown, not outside
    unmapped = thread and tgids[0] == first_tid and not (
        code in (SIG_TGKILL, SIG_TGQUEUE) and tid_passed == ev.a0
    )
    places = [
        _place(sender, tgid, node_of, unmapped and i == 0, kernel_view(ev.a1, i))
        for i, tgid in enumerate(tgids)
    ]
    worst = max(range(len(places)), key=lambda i: _DISTANCE[places[i][0]])
    beyond = beyond_outside(ev.a1)
    if beyond and places[worst][0] != "outside":
        worst = -1  # the one outside is past those the record names
    sig.relation, target = places[worst] if worst >= 0 else ("outside", None)
    sig.started_in_call = not beyond and all(
        t is not None and t.learned == "observed" and t.start_ns >= start_ns for _r, t in places
    )
    if worst >= 0:
        sig.target_host_pid = tgids[worst]
    if target is not None:
        sig.target_key, sig.target_argv = target.key, list(target.argv or [target.exe])
        sig.target_started_by = target.started_by
    if worst == 0:
        sig.target_comm = text(ev.s1) or None
    sig.more_targets = [
        t.key if t is not None else f"host pid {tgids[i]}"
        for i, (_r, t) in enumerate(places)
        if i != worst
    ]
    if beyond:
        sig.more_targets.append(f"a target past the first {SIG_TARGETS}, outside the sandbox")
    return sig


def _place(
    sender: ProcessNode, tgid: int, node_of: NodeOf, unmapped_thread: bool, kernel: KernelView
) -> tuple[SignalRelation, ProcessNode | None]:
    if tgid == sender.pid:
        return "self", sender
    if kernel is not None and not kernel[0]:
        return "outside", None  # the kernel found it in another cgroup, whatever the tree knows
    target = node_of(tgid)
    if target is None:
        if kernel is not None:  # in the sender's cgroup, gone or unseen by the tree
            return ("unknown" if kernel[1] else "sandbox"), None
        return ("unknown" if unmapped_thread else "outside"), None
    node, seen = target, set[str]()
    while node.parent is not None and node.parent not in seen:
        if node.parent == sender.key:
            return "descendant", target
        seen.add(node.parent)
        up = node_of(node.ppid)  # the parent, unless its pid now names a newer process
        if up is None or up.key != node.parent:
            break
        node = up
    return "sandbox", target


def refresh_targets(nodes: list[ProcessNode]) -> None:
    """At build: each signal's `target_argv` from its target as the tree ends. A child
    signalled right after its exec may be signalled before the exec's record is folded in
    (the records of two CPUs interleave): its program is the one it ran, not its parent's."""
    by_key = {n.key: n for n in nodes}
    for n in nodes:
        for sig in n.signals:
            target = by_key.get(sig.target_key or "")
            if target is not None:
                sig.target_argv = list(target.argv or [target.exe])
