"""The start-up's cuts (`BetweenFeed` before the server's first answer) on synthetic events:
what ends the start-up (its first answer, a window, whichever first), what a start-up cut
holds, that a long start-up is cut by the between policy, and the judged-gate
(`startup_judged`) the first answer and the first call wait on (bounded, set once)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from mtguard_rt.model import DeclaredCall
from mtguard_rt.monitor.between import BetweenFeed, BetweenPolicy
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Kind
from mtguard_rt.monitor.paths import AT_FDCWD

CALL = DeclaredCall(call_id="between-calls", server="", tool="")
SERVER = 4_190_021  # no such pid on the host: nothing to look up in /proc
CHILD = 4_190_022


def ev(kind: Kind, pid: int = SERVER, **kw: object) -> RawEvent:
    return RawEvent(ts_ns=time.monotonic_ns(), cgroup_id=7, kind=int(kind), pid=pid, **kw)  # type: ignore[arg-type]


def opened(path: str, pid: int = SERVER) -> RawEvent:
    return ev(Kind.OPEN, pid, a0=AT_FDCWD, s1=path.encode(), a1=0)


def paths(period: object) -> list[str]:
    return [e.path for p in period.tree.processes for e in p.files]  # type: ignore[attr-defined]


def slow(**kw: float) -> BetweenFeed:
    """A feed whose policy never cuts on its own within a test."""
    return BetweenFeed(CALL, BetweenPolicy(flush_after_s=60.0, flush_every_s=60.0, **kw))  # type: ignore[arg-type]


def test_the_first_answer_ends_the_start_up_and_what_follows_is_between_calls() -> None:
    f = slow()
    f.feed(ev(Kind.FORK, a0=CHILD))
    f.feed(opened("/home/u/.aws/credentials", CHILD))
    assert f.in_startup and f.take() == []  # not due: cut by policy or at its end only
    f.end_startup()
    (startup,) = f.take()
    assert startup.startup and startup.ended and paths(startup) == ["/home/u/.aws/credentials"]
    f.feed(opened("/ws/after", CHILD))
    f.seal()  # the first call's window opens
    (between,) = f.take()
    assert not between.startup and paths(between) == ["/ws/after"]
    child = next(p for p in between.tree.processes if p.pid == CHILD)
    assert child.files  # the same process, carried over from the start-up


def test_a_window_opening_first_ends_the_start_up() -> None:
    f = slow()
    f.feed(opened("/usr/lib/node/index.js"))
    f.seal()
    (startup,) = f.take()
    assert startup.startup and not f.in_startup
    f.end_startup()  # the answer after the call: nothing more is a start-up's
    assert f.take() == []


def test_a_window_closing_with_no_tail_before_it_ends_the_start_up_too() -> None:
    f = slow()
    f.begin(window=_ClosedWindow())  # no start-up event at all, then a first call
    assert not f.in_startup and f.startup_done
    f.feed(opened("/ws/x"))
    f.seal()
    (period,) = f.take()
    assert not period.startup


def test_a_long_start_up_is_cut_by_the_policy_and_every_cut_is_a_start_ups() -> None:
    f = BetweenFeed(CALL, BetweenPolicy(flush_after_s=0.0, min_gap_s=0.0))
    f.feed(opened("/a"))
    (one,) = f.take()
    f.feed(opened("/b"))
    (two,) = f.take()
    f.feed(opened("/c"))
    f.end_startup()
    (three,) = f.take()
    assert [p.startup for p in (one, two, three)] == [True, True, True]
    assert [paths(p) for p in (one, two, three)] == [["/a"], ["/b"], ["/c"]]
    assert [p.seq for p in (one, two, three)] == [1, 2, 3] and three.ended and not one.ended


def test_nothing_seen_at_start_up_needs_no_judging() -> None:
    f = slow()
    assert not f.startup_done  # the start-up is not over before its end
    f.end_startup()
    assert f.take() == [] and f.startup_done


def test_a_disabled_feed_cuts_no_start_up() -> None:
    f = BetweenFeed(CALL, BetweenPolicy(enabled=False))
    f.feed(opened("/home/u/.aws/credentials"))
    f.end_startup()
    assert f.take() == [] and f.startup_done


@pytest.mark.anyio
async def test_startup_judged_waits_for_the_end_and_every_cut_judged() -> None:
    f = BetweenFeed(CALL, BetweenPolicy(flush_after_s=0.0, min_gap_s=0.0))
    f.feed(opened("/a"))
    (one,) = f.take()
    f.feed(opened("/b"))
    f.end_startup()
    (two,) = f.take()
    done = anyio.Event()

    async def waiter() -> None:
        await f.startup_judged()
        done.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.05)
            assert not done.is_set()  # over, but two cuts to judge
            f.judged(one)
            await anyio.sleep(0.05)
            assert not done.is_set()  # one still to judge
            f.judged(two)
            await done.wait()
    assert f.startup_done
    f.feed(opened("/later"))
    (later,) = f.take()
    f.judged(later)  # a between cut: nothing to count down, the gate stays set
    assert f.startup_done and not later.startup


@pytest.mark.anyio
async def test_startup_judged_does_not_return_while_the_start_up_goes_on() -> None:
    f = slow()
    with anyio.move_on_after(0.1) as scope:
        await f.startup_judged()
    assert scope.cancelled_caught


def _ClosedWindow() -> Any:
    """A closed window with no live process (what `begin(window)` reads of it)."""
    return SimpleNamespace(_builder=SimpleNamespace(_order=[], call=SimpleNamespace(call_id="c1")))
