"""One call's observation window over one cgroup, and its settling.

The window is subscribed before it seeds (so nothing between the two is missed) and before
the call is forwarded. Its exit drains the ring buffer and waits, event-driven and bounded
by `settle_max_ms` after the response, until no process spawned during the call is alive;
then it builds the tree. Exit is shielded and bounded, so a cancelled caller neither hangs
nor loses the tree; an aborted body still yields a tree marked incomplete.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio

from ..model import BehaviorTree, DeclaredCall
from .builder import TreeBuilder
from .decode import RawEvent, Recording
from .kinds import Kind
from .procfs import SeedProcess, read_process, snapshot

LIFECYCLE = frozenset({int(Kind.FORK), int(Kind.EXEC), int(Kind.EXEC_RESULT), int(Kind.EXIT)})

if TYPE_CHECKING:
    from .monitor import Monitor


class Window:
    """Public surface: `response_arrived()`, then after exit `tree`, `events_seen`."""

    def __init__(
        self,
        monitor: Monitor,
        cgroup_id: int,
        cgroup_path: str,
        call: DeclaredCall,
        max_events: int,
        record_raw: bool = False,
    ) -> None:
        self._monitor = monitor
        self.cgroup_id = cgroup_id
        self.cgroup_path = cgroup_path
        self.start_ns = time.monotonic_ns()
        self._builder = TreeBuilder(call, self.start_ns, lookup=read_process)
        self._max_events = max_events
        self.overflow = 0
        self.response_ns: int | None = None
        self.settled_ns: int | None = None
        self._changed = anyio.Event()
        self._tree: BehaviorTree | None = None
        self._drops_at_open = monitor.drops()
        self.raw_events: list[RawEvent] | None = [] if record_raw else None
        self.seeds: list[SeedProcess] = []

    @property
    def events_seen(self) -> int:
        return self._builder.events

    def recording(self) -> Recording:
        """The window's inputs, for replay (needs MonitorConfig(record_raw=True))."""
        if self.raw_events is None:
            raise RuntimeError("recording needs MonitorConfig(record_raw=True)")
        call = self._builder.call
        return Recording(
            call=call, start_ns=self.start_ns, seeds=self.seeds, events=self.raw_events
        )

    @property
    def tree(self) -> BehaviorTree:
        if self._tree is None:
            raise RuntimeError("the tree is available once the window's context has exited")
        return self._tree

    def response_arrived(self) -> None:
        if self.response_ns is None:
            self.response_ns = time.monotonic_ns()

    # -- called by the monitor's dispatcher (event loop thread, synchronous) --------
    def _seed(self) -> None:
        for sp in snapshot(self.cgroup_path):
            self._builder.seed(sp)
            if self.raw_events is not None:
                self.seeds.append(sp)

    def _on_event(self, ev: RawEvent) -> None:
        if ev.ts_ns < self.start_ns:
            return  # queued before this window opened
        if self._builder.events >= self._max_events and ev.kind not in LIFECYCLE:
            self.overflow += 1  # effects are shed; process lifecycle is kept so settling works
        else:
            self._builder.apply(ev)
            if self.raw_events is not None:
                self.raw_events.append(ev)
        if self.response_ns is not None:  # only the settle loop waits on it
            self._changed.set()

    def _settled(self) -> bool:
        return self.response_ns is not None and self._builder.live_spawned() == 0

    async def _settle(self, settle_max_s: float) -> bool:
        """Wait for the settle condition; False when the bound expired first."""
        self.response_arrived()  # a body that never marked it: settle from now
        assert self.response_ns is not None
        remaining = settle_max_s - (time.monotonic_ns() - self.response_ns) / 1e9
        with anyio.move_on_after(max(0.0, remaining)):
            while True:
                self._changed = anyio.Event()
                await self._monitor._drain_async()
                if self._settled():
                    return True
                await self._changed.wait()
        self._monitor._drain()  # bound reached: take what is there, then stop
        return self._settled()

    def _finish(self, settled: bool, aborted: bool) -> None:
        end = time.monotonic_ns()
        self.settled_ns = end
        reasons: list[str] = []
        drops_now = self._monitor.drops()
        drops = {k: n - self._drops_at_open.get(k, 0) for k, n in drops_now.items()}
        drops = {k: n for k, n in drops.items() if n > 0}
        if drops:
            total = sum(drops.values())
            reasons.append(f"ring buffer full: {total} events dropped in the kernel")
        if self.overflow:
            drops["window_overflow"] = self.overflow
            reasons.append(
                f"window event limit {self._max_events} reached: {self.overflow} events lost"
            )
        if aborted:
            reasons.append("the window was aborted before the call completed")
        # an unsettled window is not lossy: what ran on is marked still_running in the tree
        wall = time.time_ns() - time.monotonic_ns()
        self._tree = self._builder.build(end, reasons, drops, wall)
