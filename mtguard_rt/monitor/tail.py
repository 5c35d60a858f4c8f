"""What a watched server does while no call's window is open: the between-call record.

A `Tail` takes over a cgroup when a window closes and lasts until the next one opens. It
keeps what the server read on its stdin (tools/call requests no guarded call sent are the
integrity rules' evidence) and follows the *workers* the call left running: processes spawned
during it and still alive once it settled (git's helpers, a browser), with their descendants.
Their events are folded into a tree of their own (`BehaviorTree.between` of the next window)
and handed to the closed call's online hook, so a backgrounded child that acts right after
the response is seen and, in enforce mode, killed. When the watch has a `BetweenFeed` (a
supervisor records between-call periods: between.py), every process event, the server's own
too, is also fed to it, and the period is sealed when the next window opens.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..model import BehaviorTree, DeclaredCall, StdioMessage
from .between import BetweenFeed
from .decode import RawEvent
from .kinds import Kind
from .window import HOOKED, K_STDIO, LIFECYCLE, EventHook, Window

if TYPE_CHECKING:
    from .monitor import Monitor

MAX_BETWEEN = 256  # requests kept per cgroup between windows (a flood keeps the latest)
# a worker's file and exec events go to the closed call's online rules (canary, persistence,
# shell); its network is recorded only: the closed call's endpoints say nothing of later pages
TAIL_HOOKED = frozenset(k for k, where in HOOKED.items() if where in ("files", "execs"))
K_FORK, K_KILLED = int(Kind.FORK), int(Kind.KILLED)
IDLE_CALL = DeclaredCall(call_id="between-calls", server="", tool="", arguments={})


class Tail(Window):
    """A window that never settles: fed until the next window of its watch opens."""

    def __init__(
        self,
        monitor: Monitor,
        cgroup_id: int,
        cgroup_path: str,
        call: DeclaredCall = IDLE_CALL,
        on_event: EventHook | None = None,
    ) -> None:
        max_events = monitor.config.max_events_per_window
        super().__init__(monitor, cgroup_id, cgroup_path, call, max_events, on_event=on_event)
        self.server_events = 0  # events of processes that are not workers (the server's own)
        self.feed: BetweenFeed | None = monitor._feeds.get(cgroup_id)

    @classmethod
    def after(cls, window: Window) -> Tail:
        """The tail of a closed window: its live spawned processes become workers."""
        tail = cls(
            window._monitor,
            window.cgroup_id,
            window.cgroup_path,
            window._builder.call,
            window.on_event,
        )
        tail.terminated_by = window.terminated_by  # a killed call's late forks die too
        if tail.feed is not None:
            tail.feed.begin(window)
        for proc in window._builder._order:
            if proc.spawned and proc.alive:
                tail._builder.adopt(proc, by=window._builder.call.call_id)
        return tail

    def stop(self, lost_at: dict[str, int] | None = None) -> None:
        """The next window opened (`lost_at`: its loss counts at its open, the period's
        end): nothing more is fed (the record ends here)."""
        self.settled_ns = time.monotonic_ns()
        if self.feed is not None:
            self.feed.seal(lost_at)

    @property
    def requests(self) -> list[StdioMessage]:
        return self._builder.stdio.requests

    def _on_event(self, ev: RawEvent) -> None:
        b = self._builder
        if self.feed is not None:
            self.feed.feed(ev)
        if ev.kind == K_STDIO:  # what the server read: evidence for the next call's rules
            b.stdio.feed(ev)
            if len(b.stdio.requests) > MAX_BETWEEN:
                del b.stdio.requests[: -MAX_BETWEEN // 2]
            b.stdio.responses.clear()
            return
        if ev.pid not in b._procs:
            if ev.kind == K_KILLED:
                self._killed_in_kernel(ev)
                self._feed_kill(ev.pid, self.kernel_kills[-1])
            self.server_events += 1
            return
        if b.events >= self._max_events and ev.kind not in LIFECYCLE:
            self.overflow += 1
            return
        b.apply(ev)
        killed = len(self.killed)
        if ev.kind == K_KILLED:
            self._killed_in_kernel(ev)
            self._feed_kill(ev.pid, self.kernel_kills[-1])
        elif self.terminated_by is not None and ev.kind == K_FORK:
            self._kill(ev.a0, self.terminated_by)
        elif self.on_event is not None and ev.kind in TAIL_HOOKED:
            self._hook(ev)
        for pid in self.killed[killed:]:  # killed online between calls
            self._feed_kill(pid, "terminated online", self.terminated_by or "online")

    def _feed_kill(self, pid: int, why: str, rule: str | None = None) -> None:
        if self.feed is not None:
            self.feed.killed(pid, why, rule)

    def record(self) -> BehaviorTree | None:
        """The workers' between-call tree (None when no worker did anything)."""
        workers = [p for p in self._builder._order if p.spawned]
        if not workers and not self.kernel_kills:
            return None
        reasons = []
        if self.overflow:
            reasons.append(f"between-call event limit reached: {self.overflow} events lost")
        reasons += [f"killed in the kernel between calls: {k}" for k in self.kernel_kills]
        drops = {"window_overflow": self.overflow} if self.overflow else {}
        wall = time.time_ns() - time.monotonic_ns()
        tree = self._builder.build(self.settled_ns or time.monotonic_ns(), reasons, drops, wall)
        tree.stdio = None  # the requests go to the next window's `stdio.between_calls`
        return tree
