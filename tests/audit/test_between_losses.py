"""Losses and quarantine between calls (between.py, between_calls.py, rules_lost.py) on
synthetic periods with the real policy engine: a period's cut carries its cgroup's records
lost since the last cut (from the last window's close, never the window's own), a loss
between calls denies `lost-events` (a lost read too: no result to judge it), and in enforce
it quarantines the server, as does a secret read between calls; a benign period or another
deny (a signal) does not; observe mode quarantines nothing."""

from __future__ import annotations

import anyio
import pytest

from mtguard_rt.between_calls import between_record, run_between
from mtguard_rt.model import AuditRecord
from mtguard_rt.monitor.between import BetweenFeed, BetweenPolicy

from .test_between_records import IDLE, _open, _supervisor
from .trees import HOME

WS_WRITE = 0o101  # O_WRONLY | O_CREAT


class _Counts:
    """A cgroup's loss count, as `Monitor.lost` gives it (kind -> records lost so far)."""

    def __init__(self) -> None:
        self.n: dict[str, int] = {}

    def __call__(self) -> dict[str, int]:
        return dict(self.n)


def _feed(counts: _Counts) -> BetweenFeed:
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=0.0, min_gap_s=0.0), counts)
    feed.seal()  # a call's window opened ...
    feed.rebase()  # ... and closed: what follows is between calls
    return feed


def test_a_cut_carries_the_losses_since_the_last_and_not_the_windows() -> None:
    counts = _Counts()
    feed = _feed(counts)
    counts.n = {"open": 5, "exec": 1}
    feed.feed(_open("/ws/log", WS_WRITE))
    (first,) = feed.take()
    assert first.tree.lost == {"open": 5, "exec": 1}
    assert any("records lost between calls" in r for r in first.tree.incomplete_reasons)
    feed.feed(_open("/ws/log", WS_WRITE))
    (second,) = feed.take()
    assert second.tree.lost == {}  # counted once
    counts.n = {"open": 9, "exec": 1}  # a window's own losses ...
    feed.seal()
    (sealed,) = feed.take()  # nothing pending but a loss: still cut at the window's open
    assert sealed.tree.lost == {"open": 4}
    counts.n = {"open": 20, "exec": 1}  # ... lost while the window was open: the window's
    feed.rebase()
    feed.feed(_open("/ws/log", WS_WRITE))
    (after,) = feed.take()
    assert after.tree.lost == {}


def test_no_count_no_losses() -> None:
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=0.0, min_gap_s=0.0))
    feed.seal()
    feed.feed(_open("/ws/log", WS_WRITE))
    (period,) = feed.take()
    assert period.tree.lost == {}


@pytest.mark.anyio
async def test_a_lost_read_between_calls_denies_it_would_not_in_a_call() -> None:
    counts = _Counts()
    feed = _feed(counts)
    sup = _supervisor(feed, lambda *a: None)
    counts.n = {"open": 3}  # reads only: a call's rule would leave them to the result
    feed.feed(_open("/ws/log", WS_WRITE))
    (period,) = feed.take()
    rec = await between_record(sup, period)
    assert rec.decision == "deny"
    (v,) = [v for v in rec.violations if v.rule == "lost-events"]
    assert v.mode == "enforce" and v.evidence == ["open: 3 records lost"]
    assert "between calls" in v.reason


async def _run(feed: BetweenFeed, sup: object, act: object, n: int) -> list[AuditRecord]:
    got: list[AuditRecord] = sup.records  # type: ignore[attr-defined]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(run_between, sup)
            act()  # type: ignore[operator]
            while len(got) < n:  # noqa: ASYNC110 - the sink is a list: nothing to wait on
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    return got


def _recording(feed: BetweenFeed) -> object:
    got: list[AuditRecord] = []
    sup = _supervisor(feed, lambda record, *a: got.append(record))
    sup.records = got  # type: ignore[attr-defined]
    return sup


@pytest.mark.anyio
async def test_a_flood_between_calls_quarantines_in_enforce() -> None:
    counts = _Counts()
    feed = _feed(counts)
    sup = _recording(feed)

    def flood() -> None:
        counts.n = {"open_write": 700}
        feed.feed(_open("/ws/f1", WS_WRITE))

    (rec,) = await _run(feed, sup, flood, 1)
    assert rec.decision == "deny" and "lost-events" in rec.rules
    assert sup.quarantined == "lost-events between calls"  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_secret_read_between_calls_quarantines_a_benign_period_does_not() -> None:
    feed = _feed(_Counts())
    sup = _recording(feed)
    (benign,) = await _run(feed, sup, lambda: feed.feed(_open("/ws/log", WS_WRITE)), 1)
    assert benign.decision == "allow" and sup.quarantined is None  # type: ignore[attr-defined]
    await _run(feed, sup, lambda: feed.feed(_open(f"{HOME}/.aws/credentials")), 2)
    rec = sup.records[-1]  # type: ignore[attr-defined]
    assert rec.decision == "deny" and "canary-touched" in rec.rules
    why = sup.quarantined  # type: ignore[attr-defined]
    assert why is not None and "canary-touched" in why


@pytest.mark.anyio
async def test_observe_mode_records_a_flood_between_calls_and_quarantines_nothing() -> None:
    counts = _Counts()
    feed = _feed(counts)
    sup = _recording(feed)
    sup.observe = True  # type: ignore[attr-defined]

    def flood() -> None:
        counts.n = {"exec": 40}
        feed.feed(_open("/ws/f1", WS_WRITE))

    (rec,) = await _run(feed, sup, flood, 1)
    assert rec.decision == "deny" and "lost-events" in rec.rules
    assert sup.quarantined is None  # type: ignore[attr-defined]


def test_a_period_sealed_by_a_window_ends_its_losses_at_the_windows_open() -> None:
    counts = _Counts()
    feed = _feed(counts)
    feed.feed(_open("/ws/log", WS_WRITE))
    counts.n = {"open_write": 5}  # 3 before the window opened, 2 after: the window's own
    feed.seal(lost_at={"open_write": 3})
    (period,) = feed.take()
    assert period.tree.lost == {"open_write": 3}
