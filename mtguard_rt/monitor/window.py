"""One call's observation window over one cgroup, and its settling.

The window is subscribed before it seeds (so nothing between the two is missed) and before
the call is forwarded. Its exit drains the ring buffer and, with `workers` (the guard), settles
at once: a process spawned during the call and still alive then is a *worker* of the server
(`BehaviorTree.workers`; a `tail.Tail` follows it until the next window). Without `workers`
(`mtguard trace`) it waits, event-driven and bounded by `settle_max_ms` after the response,
until no process spawned during the call is alive. An online kill always waits for its victims.
Exit is shielded and bounded, so a cancelled caller neither hangs nor loses the tree; an
aborted body still yields a tree marked incomplete.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from ..model import (
    BehaviorTree,
    DeclaredCall,
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
    StdioMessage,
)
from .builder import TreeBuilder
from .decode import RawEvent, Recording
from .kinds import IO_CAP, KILLED_OPS, WIRE_STDIN, Kind
from .paths import text
from .procfs import SeedProcess, read_process, snapshot, start_as_seeded

LIFECYCLE = frozenset({int(Kind.FORK), int(Kind.EXEC), int(Kind.EXEC_RESULT), int(Kind.EXIT)})
# kinds whose built event is handed to the window's `on_event` hook, and the node list it is in
HOOKED = {
    int(Kind.OPEN): "files",
    int(Kind.UNLINK): "files",
    int(Kind.RMDIR): "files",
    int(Kind.RENAME): "files",
    int(Kind.MKDIR): "files",
    int(Kind.CHMOD): "files",
    int(Kind.SYMLINK): "files",
    int(Kind.LINK): "files",
    int(Kind.EXEC_RESULT): "execs",  # a successful exec only, as the audit counts them
    int(Kind.CONNECT): "net",
    int(Kind.NET_SENT): "net",  # the connect or send event it counted on (not always last)
}
K_STDIO = int(Kind.STDIO)  # and each whole tools/call request the server reads (its reader)
BuiltEvent = FileEvent | ExecEvent | NetEvent | StdioMessage
# Called synchronously on the event loop thread, once per hooked event as it is folded in
# (so before the call's response): `(window, process, event)`. It must not raise.
EventHook = Callable[["Window", ProcessNode, BuiltEvent], None]

if TYPE_CHECKING:
    from .monitor import Monitor



def inherit_started_by(seeded: list[tuple[int, ProcessNode]]) -> None:
    """A seeded process no record marked, whose parent an earlier call started, is that
    call's too: a worker's child forked where no window or between-call period saw it (the
    gap as a window closes, a browser's helper under load) is the worker's business, not a
    stranger's. (ppid, node) pairs; processes from before any call stay unmarked."""
    by_pid = {node.pid: node for _ppid, node in seeded}
    for _ in range(len(seeded)):  # one level per pass: bounded by the chain's depth
        changed = False
        for ppid, node in seeded:
            parent = by_pid.get(ppid)
            if node.started_by is None and parent is not None and parent.started_by:
                node.started_by = parent.started_by
                changed = True
        if not changed:
            return

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
        on_event: EventHook | None = None,
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
        self._lost_at_open = monitor.lost(cgroup_id)  # this sandbox's own (None: unknown)
        self.raw_events: list[RawEvent] | None = [] if record_raw else None
        self.seeds: list[SeedProcess] = []
        self.on_event = on_event
        self.terminated_by: str | None = None  # set by `terminate()`
        self.killed: list[int] = []
        self.kernel_kills: list[str] = []  # evidence of kill-on-touch (EV_KILLED) records
        # the kernel stops each reader of the MCP stdin (CG_GATE, `Watch.window(gate=True)`)
        # until this window has checked what it read: the readers, to continue them
        self.gated = False
        self.readers: set[int] = set()

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
    def _seed(self, made: dict[int, tuple[int, str]] | None = None) -> None:
        """Seed the cgroup's live processes; `made`: pid -> (start_ns as /proc gives it, call
        id) of processes earlier calls of the watch spawned, to mark them `started_by` (same
        pid and start: no slack against a fork record's time, which load can delay)."""
        seeded = []
        for sp in snapshot(self.cgroup_path):
            proc = self._builder.seed(sp)
            was = made.get(sp.pid) if made else None
            if was is not None and sp.start_ns == was[0]:
                proc.node.started_by = was[1]
            seeded.append((sp.ppid, proc.node))
            if self.raw_events is not None:
                self.seeds.append(sp)
        inherit_started_by(seeded)

    def made(self, call_id: str) -> dict[int, tuple[int, str]]:
        """The live processes a call made, as `_seed` takes them: those spawned in this
        window (`call_id`; their /proc start read now, one stat each), and seeded ones an
        earlier call made (kept as they were marked)."""
        out: dict[int, tuple[int, str]] = {}
        for p in self._builder._order:
            if not p.alive:
                continue
            node = p.node
            if p.spawned and node.learned == "observed":
                start = start_as_seeded(node.pid, node.start_ns)
                if start is not None:  # else gone: no later snapshot holds it
                    out[node.pid] = (start, node.started_by or call_id)
            elif node.started_by is not None:
                out[node.pid] = (node.start_ns, node.started_by)
        return out

    def _on_event(self, ev: RawEvent) -> None:
        if ev.ts_ns < self.start_ns:
            return  # queued before this window opened
        if self._builder.events >= self._max_events and ev.kind not in LIFECYCLE:
            self.overflow += 1  # effects are shed; process lifecycle is kept so settling works
        else:
            asked = len(self._builder.stdio.requests) if ev.kind == K_STDIO else 0
            self._builder.apply(ev)
            if self.raw_events is not None:
                self.raw_events.append(ev)
            if ev.kind == Kind.KILLED:
                self._killed_in_kernel(ev)
            elif self.terminated_by is not None and ev.kind == Kind.FORK:
                self._kill(ev.a0, self.terminated_by)  # forked before our kill landed
            elif self.on_event is not None and ev.kind in HOOKED:
                self._hook(ev)
            elif self.on_event is not None and ev.kind == K_STDIO:
                self._hook_requests(asked)
        if self.gated and ev.kind == K_STDIO and ev.a0 == WIRE_STDIN:
            self._release(ev)
        if self.response_ns is not None:  # only the settle loop waits on it
            self._changed.set()

    def _release(self, ev: RawEvent) -> None:
        """A stdin record under the gate: once its read's last record is in (and checked
        above), continue the reader the kernel stopped, unless the check killed it."""
        self.readers.add(ev.pid)
        if ev.a1 + len(ev.s1) < min(ev.a2, IO_CAP):
            return  # more of this read follows (the kernel stops only after the last)
        if ev.pid in self.killed:
            return
        self.signal(ev.pid, signal.SIGCONT)

    def signal(self, pid: int, sig: int) -> bool:
        """Send `sig` to `pid` if it is (still) one of this sandbox's processes (pidfd: no
        pid reuse race)."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False  # already gone
        try:
            with open(f"/proc/{pid}/cgroup", "rb") as f:
                line = next((x for x in f.read().splitlines() if x.startswith(b"0::")), b"")
            rel = line[3:].decode(errors="replace").rstrip("/")
            if not rel or not self.cgroup_path.rstrip("/").endswith(rel):
                return False  # not (or no longer) this sandbox's process
            signal.pidfd_send_signal(fd, sig)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def _hook(self, ev: RawEvent) -> None:
        if ev.kind == Kind.EXEC_RESULT and ev.ret != 0:
            return  # a failed exec ran nothing (the audit counts successful execs only)
        proc = self._builder._procs.get(ev.pid)
        built = getattr(proc.node, HOOKED[ev.kind]) if proc is not None else None
        if ev.kind == Kind.NET_SENT:
            built = [self._builder.last_net] if self._builder.last_net is not None else None
        if proc is not None and built and self.on_event is not None:
            self.on_event(self, proc.node, built[-1])

    def _hook_requests(self, start: int) -> None:
        """Hand the hook each whole tools/call this record completed, with its reader. Not
        once records of the window may be missing (ring buffer drops of stdio, window
        overflow): a line could then be spliced from two; post-verification reports it
        unverified instead."""
        new = [
            m
            for m in self._builder.stdio.requests[start:]
            if m.method == "tools/call" and not m.truncated
        ]
        if not new or self.overflow:
            return
        if self._monitor.drops().get("stdio", 0) > self._drops_at_open.get("stdio", 0):
            return
        for msg in new:
            proc = self._builder._procs.get(msg.pid)  # the server, seeded at window open
            if proc is not None and self.on_event is not None:
                self.on_event(self, proc.node, msg)

    def _own_lost(self) -> dict[str, int] | None:
        """This cgroup's records lost in the kernel during the window, per kind; None when
        the program does not count them per cgroup."""
        if self._lost_at_open is None:
            return None
        now = self._monitor.lost(self.cgroup_id) or {}
        diff = {k: n - self._lost_at_open.get(k, 0) for k, n in now.items()}
        return {k: n for k, n in diff.items() if n > 0}

    def _killed_in_kernel(self, ev: RawEvent) -> None:
        proc = self._builder._procs.get(ev.pid)
        op = KILLED_OPS.get(ev.a0, "?")
        what = f"{op} {text(ev.s1)}" if op.endswith(" onto") else f"{op} of {text(ev.s1)}"
        if proc is not None:
            proc.node.killed_by = proc.node.killed_by or f"kill-on-touch: {what}"
            who = f"pid {ev.pid} {proc.node.exe or '?'}"
        else:
            who = f"pid {ev.pid}"
        self.kernel_kills.append(f"{who} SIGKILLed in the kernel at the {what}")

    # -- online termination ------------------------------------------------------------
    def terminate(self, offender: int, rule: str) -> list[int]:
        """SIGKILL, at once, every live process spawned during the call plus `offender`
        (which may be the long-lived server itself); later forks are killed as they are
        seen. Only pids still in this window's cgroup are signalled (pidfd: no pid reuse
        race). Returns the pids signalled; their nodes carry `killed_by = rule`."""
        if self.terminated_by is None:
            self.terminated_by = rule
        targets = [p.node.pid for p in self._builder._order if p.spawned and p.alive]
        if offender not in targets:
            targets.insert(0, offender)
        return [pid for pid in targets if self._kill(pid, rule)]

    def _kill(self, pid: int, rule: str) -> bool:
        if not self.signal(pid, signal.SIGKILL):
            return False
        proc = self._builder._procs.get(pid)
        if proc is not None and proc.node.killed_by is None:
            proc.node.killed_by = rule
        self.killed.append(pid)
        return True

    def _settled(self) -> bool:
        return self.response_ns is not None and self._builder.live_spawned() == 0

    async def _settle(self, settle_max_s: float, workers: bool = False) -> bool:
        """Wait for the settle condition; False when the bound expired first. `workers`: the
        ring buffer drained after the response is enough (live spawned processes are left
        running as workers), unless this window killed: its victims' exits are waited for."""
        self.response_arrived()  # a body that never marked it: settle from now
        assert self.response_ns is not None
        remaining = settle_max_s - (time.monotonic_ns() - self.response_ns) / 1e9
        with anyio.move_on_after(max(0.0, remaining)):
            while True:
                self._changed = anyio.Event()
                await self._monitor._drain_async()
                if self._settled() or (workers and self.terminated_by is None):
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
        lost = self._own_lost()
        if lost:
            what = ", ".join(f"{k} {n}" for k, n in sorted(lost.items()))
            reasons.append(f"this sandbox's records lost in the kernel: {what}")
        self._tree = self._builder.build(end, reasons, drops, wall)
        self._tree.lost = lost or {}
        self._tree.workers = [p.node.key for p in self._builder._order if p.spawned and p.alive]
