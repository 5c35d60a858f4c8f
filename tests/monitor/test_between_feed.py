"""The between-call flush policy (`BetweenFeed`) on synthetic events: when a period is cut,
what a cut holds, and that it is bounded (never per event, never more than `max_events`)."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import msgspec
import pytest

from mtguard_rt.config import BetweenSection, load_config
from mtguard_rt.model import DeclaredCall
from mtguard_rt.monitor.between import BetweenFeed, BetweenPolicy
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Kind
from mtguard_rt.monitor.paths import AT_FDCWD

CALL = DeclaredCall(call_id="between-calls", server="", tool="")
SERVER = 4_190_001  # above any pid this host hands out by default: no /proc entry to look up
CHILD = 4_190_002


def ev(kind: Kind, pid: int = SERVER, **kw: object) -> RawEvent:
    return RawEvent(ts_ns=time.monotonic_ns(), cgroup_id=7, kind=int(kind), pid=pid, **kw)  # type: ignore[arg-type]


def opened(path: str, pid: int = SERVER) -> RawEvent:
    return ev(Kind.OPEN, pid, a0=AT_FDCWD, s1=path.encode(), a1=0o101)  # O_WRONLY|O_CREAT


def feed(**policy: float) -> BetweenFeed:
    f = BetweenFeed(CALL, BetweenPolicy(**policy))  # type: ignore[arg-type]
    f.seal()  # a first call's window opened: what follows is between calls
    return f


def test_the_start_up_before_any_call_is_not_a_between_period() -> None:
    """It is cut into start-up periods (tests/monitor/test_startup_cuts.py), not between."""
    f = BetweenFeed(CALL, BetweenPolicy(flush_after_s=0.0, min_gap_s=0.0))
    f.feed(opened("/usr/lib/python3/site.py"))
    (startup,) = f.take()
    assert startup.startup
    f.seal()  # the first window opens, then closes: from now on it is between calls
    f.feed(opened("/ws/after"))
    (period,) = f.take()
    assert not period.startup
    assert [e.path for p in period.tree.processes for e in p.files] == ["/ws/after"]


def test_nothing_pending_is_never_due() -> None:
    f = feed()
    assert f.due_ns() is None and f.take() == []
    f.seal()  # a period with nothing in it yields no record
    assert f.take() == []


def test_an_effect_is_due_after_flush_after_s_and_its_burst_is_one_cut() -> None:
    f = feed(flush_after_s=0.5, min_gap_s=0.0)
    t0 = time.monotonic_ns()
    for i in range(50):
        f.feed(opened(f"/ws/log{i}"))
    due = f.due_ns()
    assert due is not None and 0.45e9 <= due - t0 <= 0.6e9
    assert f.take() == []  # not yet: a burst is batched, never a record per event


def test_only_lifecycle_waits_for_flush_every_s() -> None:
    f = feed(flush_after_s=0.01, flush_every_s=30.0, min_gap_s=0.0)
    t0 = time.monotonic_ns()
    f.feed(ev(Kind.FORK, a0=CHILD))
    f.feed(ev(Kind.EXIT, CHILD))
    due = f.due_ns()
    assert due is not None and due - t0 >= 29e9


def test_seal_cuts_at_once_and_marks_the_period_ended() -> None:
    f = feed(flush_after_s=60.0)
    f.feed(opened("/ws/a"))
    f.seal()
    (period,) = f.take()
    assert period.ended and period.seq == 1
    paths = [e.path for p in period.tree.processes for e in p.files]
    assert paths == ["/ws/a"]
    assert f.due_ns() is None


def test_max_events_bounds_a_cut_and_counts_the_rest() -> None:
    f = feed(max_events=10, flush_after_s=60.0, flush_every_s=60.0, min_gap_s=0.0)
    for i in range(25):
        f.feed(opened(f"/ws/f{i}"))
    assert (f.due_ns() or 0) <= time.monotonic_ns()  # due now, not after flush_after_s
    (period,) = f.take()
    files = [e for p in period.tree.processes for e in p.files]
    assert len(files) == 10
    assert period.tree.drops == {"window_overflow": 15} and not period.tree.complete


def test_min_gap_spaces_cuts_and_live_processes_carry_over() -> None:
    f = feed(flush_after_s=0.0, min_gap_s=5.0)
    f.feed(ev(Kind.FORK, a0=CHILD))
    f.feed(opened("/ws/one", CHILD))
    (first,) = f.take()  # the first cut of a feed has no gap before it
    assert not first.ended
    f.feed(opened("/ws/two", CHILD))
    due = f.due_ns()
    assert due is not None and due - time.monotonic_ns() > 4e9  # the gap holds the second
    assert f.take() == []
    f.seal()
    (second,) = f.take()
    child = next(p for p in second.tree.processes if p.pid == CHILD)
    assert [e.path for e in child.files] == ["/ws/two"]  # the same process, carried over


def test_kills_are_evidence_and_make_the_cut_due() -> None:
    f = feed(flush_after_s=0.0, min_gap_s=0.0)
    f.feed(ev(Kind.FORK, a0=CHILD))
    f.killed(CHILD, "terminated online", "canary-touched")
    f.killed(CHILD, "pid 4190002 SIGKILLed in the kernel at the open of /x")
    (period,) = f.take()
    assert period.online_kills == {CHILD: "canary-touched"}
    assert period.kernel_kills == ["pid 4190002 SIGKILLed in the kernel at the open of /x"]
    child = next(p for p in period.tree.processes if p.pid == CHILD)
    assert child.killed_by == "canary-touched"


def test_disabled_feeds_nothing() -> None:
    f = BetweenFeed(CALL, BetweenPolicy(enabled=False))
    f.seal()
    f.feed(opened("/ws/a"))
    f.seal()
    assert f.take() == []


@pytest.mark.anyio
async def test_next_periods_wakes_on_an_effect_and_is_bounded() -> None:
    f = feed(flush_after_s=0.05, min_gap_s=0.0)
    got: list[float] = []

    async def later() -> None:
        await anyio.sleep(0.1)
        f.feed(opened("/ws/late"))
        got.append(time.monotonic())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            (period,) = await f.next_periods()
    waited = time.monotonic() - got[0]
    assert 0.04 <= waited < 1.0, waited
    assert [e.path for p in period.tree.processes for e in p.files] == ["/ws/late"]


def test_the_config_section_is_the_policy(tmp_path: Path) -> None:
    """`[between]` in the guard's TOML holds exactly the policy's fields and defaults (the
    guard converts one into the other)."""
    assert msgspec.structs.asdict(BetweenSection()) == msgspec.structs.asdict(BetweenPolicy())
    path = tmp_path / "guard.toml"
    path.write_text("[between]\nflush_after_s = 0.25\nmin_gap_s = 1\n")
    section = load_config(path).between
    policy = BetweenPolicy(**msgspec.structs.asdict(section))
    assert (policy.flush_after_s, policy.min_gap_s, policy.enabled) == (0.25, 1.0, True)


def test_a_live_process_is_not_still_running_in_a_cut() -> None:
    """A between cut holds no call: a process alive at the cut is carried into the next one,
    not "left running" (`incomplete-tree` would note it on every record of a busy server)."""
    f = feed(flush_after_s=0.0, min_gap_s=0.0)
    f.feed(ev(Kind.FORK, a0=CHILD))
    f.feed(opened("/ws/one", CHILD))
    (period,) = f.take()
    assert [p.still_running for p in period.tree.processes] == [False, False]
