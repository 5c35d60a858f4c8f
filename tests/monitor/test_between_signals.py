"""Which signals make a between-call period due soon (`BetweenFeed`, synthetic records): a
signal to another process, delivered or refused, is an effect (cut after `flush_after_s`,
not `flush_every_s`); a probe (signal 0) or a signal to the sender itself is not."""

from __future__ import annotations

import struct
import time

import pytest

from mtguard_rt.model import DeclaredCall
from mtguard_rt.monitor.between import BetweenFeed, BetweenPolicy
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import SIG_KILL, SIG_TGKILL, Kind

CALL = DeclaredCall(call_id="between-calls", server="", tool="")
SERVER, OTHER = 4_190_021, 4_190_022  # no such pids on the host: nothing in /proc


def sig(signo: int, targets: list[int], code: int = SIG_KILL, to: int = OTHER) -> RawEvent:
    count = len(targets)
    first = targets[0] if targets else 0
    return RawEvent(
        ts_ns=time.monotonic_ns(), cgroup_id=7, kind=int(Kind.SIGNAL), pid=SERVER, a0=to,
        a2=signo, a3=code | count << 8 | first << 32, ret=0 if count else -3,
        addr=struct.pack("<4I", *(targets + [0] * 4)[:4]),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("event", "effect"),
    [
        (sig(15, [OTHER]), True),  # delivered to another process
        (sig(15, []), True),  # refused (another pid namespace's pid): an attempt
        (sig(9, [OTHER, SERVER]), True),  # a process group
        (sig(0, [OTHER]), False),  # a probe: is it alive?
        (sig(23, [SERVER], SIG_TGKILL, SERVER), False),  # its own thread (Go's preemption)
    ],
    ids=["delivered", "refused", "group", "probe", "self"],
)
def test_a_signal_to_another_process_is_an_effect(event: RawEvent, effect: bool) -> None:
    feed = BetweenFeed(CALL, BetweenPolicy(flush_after_s=0.5, min_gap_s=0.0, flush_every_s=30))
    feed.seal()  # between calls
    t0 = time.monotonic_ns()
    feed.feed(event)
    due = feed.due_ns()
    assert due is not None
    assert (due - t0 < 5e9) is effect  # 0.5 s after it, else the 30 s of lifecycle only
