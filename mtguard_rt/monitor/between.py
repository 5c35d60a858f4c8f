"""The between-call period of one watched cgroup, cut into audit material (issue 14).

A `BetweenFeed` lives as long as its watch. While no call's window is open, every process
event of the cgroup (the server's own processes and the workers calls left running) is folded
into a period tree, bounded by `BetweenPolicy.max_events` (more is counted, not kept). The
tree is cut into a `BetweenPeriod` when the policy says so, never per event: `flush_after_s`
after the first effect (file, exec, network, a kill) but at most once per `min_gap_s`; after
`flush_every_s` when only process lifecycle is pending; at once (still the gap) at
`max_events`; and when the period ends (`seal`: the next window opens, before it seeds, so no
event loses its place). The start-up (from the sandbox's release until `end_startup`: the
server answered its first request, or a window opens) is cut the same way into periods marked
`startup`; its owner says when each is judged (`judged`), and `startup_judged()` waits until
the start-up is over and every cut of it judged. `next_periods()` is the wait its owner's
flush task loops on. Given its cgroup's loss count (`lost`: the kernel's, or the agent's,
per kind), each cut carries the records lost since the last one (`BehaviorTree.lost`), from
the moment the last window closed (`rebase`), so `lost-events` judges a flood between calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import msgspec

from ..errors import MonitorError
from ..model import BehaviorTree, DeclaredCall
from .builder import TreeBuilder
from .decode import RawEvent
from .kinds import Kind
from .procfs import read_process
from .window import HOOKED, K_STDIO, LIFECYCLE

if TYPE_CHECKING:
    from .window import Window

EFFECTS = frozenset(HOOKED) | {int(Kind.KILLED)}  # what makes a period worth a record soon
K_KILLED, K_SIGNAL = int(Kind.KILLED), int(Kind.SIGNAL)
LostCounts = Callable[[], "dict[str, int] | None"]  # a cgroup's lost records, per kind


def _control(ev: RawEvent) -> bool:
    """A signal that is an effect: not a probe (signal 0: a parent-alive check), not to the
    sender itself (runtimes signal their own threads: Go's preemption, profilers); one that
    reached nothing (refused: another pid namespace's pid) is an attempt, an effect too."""
    if ev.kind != K_SIGNAL or ev.a2 == 0:
        return False
    count = (ev.a3 >> 8) & 0xFFFFFF  # monitor.bpf.c's signals block (kinds.py: SIGNAL)
    return not count or count > 1 or int.from_bytes(ev.addr[:4], "little") != ev.pid


class BetweenPolicy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """When a between-call record is cut (documented in README, "Between calls")."""

    enabled: bool = True
    flush_after_s: float = 0.5  # an effect is recorded this long after it (its burst batched)
    min_gap_s: float = 2.0  # at most one record per this many seconds per server
    flush_every_s: float = 30.0  # only forks and exits pending: one record this often
    max_events: int = 20_000  # events per record (~300 B each): reached, the cut is due now


class BetweenPeriod(msgspec.Struct, kw_only=True):
    """One cut of a between-call period: its tree, what was killed in the kernel, whether the
    period ended with it (the next call's window opened)."""

    seq: int
    tree: BehaviorTree
    startup: bool = False  # a cut of the start-up (before the server's first answer)
    kernel_kills: list[str] = msgspec.field(default_factory=list)  # kill-on-touch evidence
    online_kills: dict[int, str] = msgspec.field(default_factory=dict)  # pid -> online rule
    ended: bool = False


class BetweenFeed:
    def __init__(
        self, server_call: DeclaredCall, policy: BetweenPolicy, lost: LostCounts | None = None
    ) -> None:
        self.policy = policy
        self._call = server_call
        self._lost = lost
        self._lost_base = self._lost_now()  # the counts the next cut's losses start from
        self._builder: TreeBuilder | None = None
        self._pending = 0  # events folded since the last cut
        self._first_ns: int | None = None  # monotonic ns of the first pending event
        self._effect_ns: int | None = None  # ... of the first pending effect
        self._last_cut_ns = 0
        self._overflow = 0
        self._kills: list[str] = []
        self._online: dict[int, str] = {}
        self._ready: list[BetweenPeriod] = []
        self._wake = anyio.Event()
        self.seq = 0
        self.cut_total = 0
        self.in_startup = True  # until the server's first answer or the first window
        self._unjudged = 0  # start-up cuts not judged yet (`judged`)
        self._judged = anyio.Event()

    # -- losses ----------------------------------------------------------------------------
    def _lost_now(self) -> dict[str, int] | None:
        """None: not counted, or the count failed (the monitor is lost: every later window
        fails closed on it; a period's record is no place to raise)."""
        try:
            return self._lost() if self._lost is not None else None
        except MonitorError:
            return None

    def rebase(self) -> None:
        """A window closed (its losses are its tree's): losses count from now."""
        self._lost_base = self._lost_now()

    def _new_losses(self, upto: dict[str, int] | None = None) -> dict[str, int]:
        """Records of the cgroup lost since the last cut (or `rebase`), per kind, until now
        (or until the counts `upto`: a window's at its open, which are its own from there)."""
        now, base = (upto if upto is not None else self._lost_now()), self._lost_base
        if now is None or base is None:  # not counted (yet): from now on
            self._lost_base = now
            return {}
        diff = {k: n - base.get(k, 0) for k, n in now.items()}
        self._lost_base = now
        return {k: n for k, n in diff.items() if n > 0}

    # -- fed by the tail (event loop thread, synchronous) --------------------------------
    def begin(self, window: Window | None = None) -> None:
        """A new period: the closed window's live processes carried over (its workers as
        spawned, the server's own as seeded). What was pending is cut first."""
        if window is not None:
            self._end_startup()
        if self._pending:
            self._cut(ended=True)
        now = time.monotonic_ns()
        self._builder = TreeBuilder(self._call, now, lookup=read_process)
        if window is not None:
            by = window._builder.call.call_id  # its spawned processes: workers of that call
            for proc in window._builder._order:
                if proc.alive:
                    self._builder.adopt(proc, spawned=proc.spawned, by=by)

    def feed(self, ev: RawEvent) -> None:
        if not self.policy.enabled or ev.kind == K_STDIO:
            return  # what the server read is the integrity rules' (next window's stdio)
        if self._builder is None:
            self.begin()
        b = self._builder
        assert b is not None
        if self._pending >= self.policy.max_events and ev.kind not in LIFECYCLE:
            self._overflow += 1
            return
        b.apply(ev)
        self._pending += 1
        now = time.monotonic_ns()
        if self._first_ns is None:
            self._first_ns = now
        if self._effect_ns is None and (ev.kind in EFFECTS or _control(ev)):
            self._effect_ns = now
            self._wake.set()
        if self._pending >= self.policy.max_events:
            self._wake.set()

    def killed(self, pid: int, why: str, rule: str | None = None) -> None:
        """A process of the period was killed: in the kernel (`why`: its evidence) or by the
        online rule `rule`."""
        proc = self._builder._procs.get(pid) if self._builder is not None else None
        if proc is not None and proc.node.killed_by is None:
            proc.node.killed_by = rule or "kill-on-touch"
        if rule is None:
            self._kills.append(why)
        else:
            self._online[pid] = rule
        if self._effect_ns is None:
            self._effect_ns = time.monotonic_ns()
        self._wake.set()

    def seal(self, lost_at: dict[str, int] | None = None) -> None:
        """The period ends (a window opens; `lost_at`: its loss counts at its open, so no
        loss counts twice): what is pending is cut now, and so are losses with no event
        left to show (a flood that lost every record of its own)."""
        lost = self._new_losses(lost_at) if self.policy.enabled else {}
        if self._pending or self._kills or self._online or lost:
            if self._builder is None:
                self.begin()
            self._cut(ended=True, lost=lost)
        self._builder = None
        self._end_startup()

    # -- the start-up ----------------------------------------------------------------------
    def end_startup(self) -> None:
        """The server answered its first request: what is pending is the start-up's last cut;
        what follows is between calls (its live processes carried over). Idempotent."""
        if not self.in_startup:
            return
        if self._pending or self._kills or self._online:
            self._cut(ended=True, carry=True)
        self._end_startup()

    def _end_startup(self) -> None:
        if self.in_startup:
            self.in_startup = False
            if not self._unjudged:
                self._judged.set()

    def judged(self, period: BetweenPeriod) -> None:
        """Its owner is done with `period` (recorded, or lost): a start-up cut counts down."""
        if period.startup and self._unjudged:
            self._unjudged -= 1
            if not self._unjudged and not self.in_startup:
                self._judged.set()

    @property
    def startup_done(self) -> bool:
        return not self.in_startup and not self._unjudged

    async def startup_judged(self) -> None:
        """Wait until the start-up is over and each of its cuts judged (the caller bounds
        the wait). Once done it stays done: no cut is a start-up's after `end_startup`."""
        await self._judged.wait()

    # -- the policy ------------------------------------------------------------------------
    def due_ns(self) -> int | None:
        """When the pending events are to be cut (monotonic ns), None: nothing pending."""
        if not (self._pending or self._kills or self._online):
            return None
        p = self.policy
        gap = self._last_cut_ns + int(p.min_gap_s * 1e9)
        if self._pending >= p.max_events:
            return gap
        if self._effect_ns is not None:
            return max(self._effect_ns + int(p.flush_after_s * 1e9), gap)
        assert self._first_ns is not None
        return max(self._first_ns + int(p.flush_every_s * 1e9), gap)

    def take(self) -> list[BetweenPeriod]:
        """The cuts ready now (sealed periods, and the open one if it is due)."""
        due = self.due_ns()
        if due is not None and time.monotonic_ns() >= due:
            self._cut(ended=False)
        out, self._ready = self._ready, []
        return out

    async def next_periods(self) -> list[BetweenPeriod]:
        """Wait until a cut is ready (its owner's task loops on this; cancel releases it)."""
        while True:
            out = self.take()
            if out:
                return out
            self._wake = anyio.Event()
            due = self.due_ns()
            if due is None:
                await self._wake.wait()
            else:
                with anyio.move_on_after(max(0.0, (due - time.monotonic_ns()) / 1e9)):
                    await self._wake.wait()

    def _cut(self, ended: bool, carry: bool = False, lost: dict[str, int] | None = None) -> None:
        """Cut what is pending; `carry`: a period that goes on (also `not ended`) starts the
        next cut with the live processes. `lost`: the losses already taken (`seal`)."""
        b = self._builder
        now = time.monotonic_ns()
        if lost is None:
            lost = self._new_losses() if b is not None else {}
        if b is not None and (self._pending or self._kills or self._online or lost):
            reasons = []
            if self._overflow:
                reasons.append(f"between-call event limit reached: {self._overflow} events lost")
            if lost:
                what = ", ".join(f"{k} {n}" for k, n in sorted(lost.items()))
                reasons.append(f"this sandbox's records lost between calls: {what}")
            drops = {"window_overflow": self._overflow} if self._overflow else {}
            wall = time.time_ns() - time.monotonic_ns()
            tree = b.build(now, reasons, drops, wall)
            tree.lost = lost
            tree.stdio = None  # the requests read meanwhile are the next window's evidence
            for node in tree.processes:  # no call to hold: a live one goes on in the next cut
                node.still_running = False
            self.seq += 1
            self.cut_total += 1
            self._unjudged += self.in_startup
            self._ready.append(
                BetweenPeriod(
                    seq=self.seq,
                    tree=tree,
                    startup=self.in_startup,
                    kernel_kills=self._kills,
                    online_kills=self._online,
                    ended=ended,
                )
            )
            self._wake.set()
            if carry or not ended:  # it goes on: its live processes carried into the next cut
                nb = TreeBuilder(self._call, now, lookup=read_process)
                for proc in b._order:
                    if proc.alive:
                        nb.adopt(proc, spawned=proc.spawned)
                self._builder = nb
        self._pending, self._first_ns, self._effect_ns = 0, None, None
        self._overflow, self._kills, self._online = 0, [], {}
        self._last_cut_ns = now
