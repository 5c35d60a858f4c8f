"""`open_monitor()`: one BPF program, one ring-buffer reader task, many watched cgroups.

The reader waits on the ring buffer's fd (no polling loop, no thread) and consumes; each
record is decoded and dispatched by cgroup id to the one open window of that cgroup's watch,
which folds it into its tree at once (so the ring buffer is the only queue: its overflow is
counted in the kernel, per kind, and marks the affected trees incomplete). A watch keeps
its cgroup in the kernel filter for its lifetime; windows of one watch never overlap. Between
windows a `Tail` takes the cgroup's events: what the server reads, and the workers a call
left running (with `workers`), for the next window's tree.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec

from ..errors import MonitorError, MonitorLost
from ..model import DeclaredCall
from .abstract_unix import mark_holders
from .between import BetweenFeed, BetweenPolicy
from .decode import RawEvent
from .kinds import ACT_KILL_MODIFY, ACT_KILL_WRITE
from .loader import load_program
from .procfs import stdio_pipes
from .source import EventSource
from .tail import Tail
from .window import EventHook, Window

CONSUME_BATCH = 2048  # records per event-loop turn: about 5 ms of work, then other tasks run


class MonitorConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    settle_max_ms: float = 1000.0  # bound on waiting for spawned processes after a response
    ring_pages: int = 4096  # ring buffer size in pages (16 MiB): a power of two
    max_events_per_window: int = 200_000  # events kept per window (~300 B each); more: loss
    record_raw: bool = False  # keep each window's RawEvents (fixtures, `trace --record`)
    # True (the guard): a window settles once the response has arrived and the ring buffer is
    # drained; processes it spawned that are still alive are workers, followed between calls.
    # False (`mtguard trace`): wait for them, up to settle_max_ms.
    workers: bool = False
    # between-call records (`Watch.between`, between.py): when they are cut
    between: BetweenPolicy = msgspec.field(default_factory=BetweenPolicy)


class Watch:
    def __init__(
        self, monitor: Monitor, cgroup_id: int, cgroup_path: str, eager: bool = False
    ) -> None:
        self._monitor = monitor
        self.cgroup_id = cgroup_id
        self.cgroup_path = cgroup_path
        self.eager = eager
        self.network_policy: list[str] = []  # names allowed in the kernel (egress.py): trees
        self.resolvers: list[str] | None = None  # the sandbox's resolvers (egress.py): trees
        self.host_network = False  # the sandbox shares the host's network namespace: trees
        # online enforce with kernel kills (guard.py): each window gates the MCP stdin, so a
        # swapped or replayed call is killed before the server acts on it (window.py)
        self.gate_stdin = False
        self._readers: set[int] = set()  # who read the stdin under a gate: continued at ends
        # live processes earlier calls spawned (workers, their forks): pid -> (start_ns, call id)
        self._made: dict[int, tuple[int, str]] = {}

    def protect(self, paths: dict[str, int]) -> list[str]:
        """Mark exact absolute paths with ACT_* bits (wake the reader, kill on open/exec)
        for this cgroup, until the watch ends. Returns the paths refused."""
        return self._monitor.program.protect(self.cgroup_id, paths)

    @property
    def between(self) -> BetweenFeed:
        """This cgroup's between-call periods, fed from now on (made on first use: a watch
        nobody records between calls for keeps only its tail)."""
        feeds = self._monitor._feeds
        feed = feeds.get(self.cgroup_id)
        if feed is None:
            idle = DeclaredCall(call_id="between-calls", server="", tool="", arguments={})
            lost = partial(self._monitor.lost, self.cgroup_id)  # losses judged between calls
            feed = feeds[self.cgroup_id] = BetweenFeed(idle, self._monitor.config.between, lost)
            tail = self._monitor._tails.get(self.cgroup_id)
            if tail is not None:
                tail.feed = feed
        return feed

    async def end_startup(self) -> None:
        """The server answered its first request: what it did until now, drained from the
        ring buffer, is its start-up's last cut (`BetweenFeed.end_startup`); what follows is
        between calls. Nothing without a feed or once the start-up is over."""
        feed = self._monitor._feeds.get(self.cgroup_id)
        if feed is not None and feed.in_startup:
            await self._monitor._drain_async()
            feed.end_startup()

    def flush(self) -> None:
        """The watch is about to end: the events still in the ring buffer are read and what
        its feed holds is cut now (its last period; nothing while a window owns them)."""
        feed = self._monitor._feeds.get(self.cgroup_id)
        if feed is None or self.cgroup_id in self._monitor._windows:
            return
        try:
            self._monitor._drain()
        except MonitorError:
            pass  # what was read is still cut; the loss shows in the monitor's error
        feed.seal()

    @contextmanager
    def consent(self, paths: Iterable[str]) -> Iterator[list[str]]:
        """Lift kill on write and on modify (ACT_KILL_WRITE, ACT_KILL_MODIFY) of these
        protected paths while the block runs (the writes one call has the user's consent
        for), then put them back. Kill on open, a canary secret read, is never lifted.
        Yields the paths lifted."""
        program = self._monitor.program
        lift = ACT_KILL_WRITE | ACT_KILL_MODIFY
        before = {p: program.actions(self.cgroup_id, p) for p in dict.fromkeys(paths)}
        lifted = {p: act & ~lift for p, act in before.items() if act & lift}
        if lifted:
            program.protect(self.cgroup_id, lifted)
        try:
            yield sorted(lifted)
        finally:
            if lifted:
                program.protect(self.cgroup_id, {p: before[p] for p in lifted})

    @asynccontextmanager
    async def window(
        self, call: DeclaredCall, on_event: EventHook | None = None
    ) -> AsyncIterator[Window]:
        """`on_event` sees each file/exec/connect event as it is built (online rules)."""
        mon = self._monitor
        if self.cgroup_id in mon._windows:
            raise MonitorError(f"a window is already open on cgroup {self.cgroup_id}")
        mon._check()
        win = Window(
            mon,
            self.cgroup_id,
            self.cgroup_path,
            call,
            mon.config.max_events_per_window,
            mon.config.record_raw,
            on_event,
        )
        # subscribe first (records queued from before the window are dropped by timestamp) ...
        mon._windows[self.cgroup_id] = win
        gate = getattr(mon.program, "gate", None)
        if self.gate_stdin and on_event is not None and gate is not None:
            win.gated = True
            gate(self.cgroup_id, True)
            for pid in sorted(self._readers):  # one stopped as the last window closed
                win.signal(pid, signal.SIGCONT)
        # what the server read and its workers did while no window was open (since the last)
        between = mon._tails.pop(self.cgroup_id, None)
        if between is not None:
            between.stop(win._lost_at_open)  # its losses end where the window's begin
            for pid, made in between.made(between._builder.call.call_id).items():
                self._made.setdefault(pid, made)  # forked by a worker between calls
        try:
            win._seed(self._made)  # ... then seed, so nothing in between is missed
            try:
                yield win
            except BaseException:
                try:
                    mon._drain()  # synchronous: nothing here can be cancelled
                except MonitorError:
                    pass  # the body's exception is the one to report
                win._finish(settled=False, aborted=True)
                raise
            with anyio.CancelScope(shield=True):
                settled = await win._settle(mon.config.settle_max_ms / 1000, mon.config.workers)
                win._finish(settled=settled, aborted=False)
        finally:
            mon._windows.pop(self.cgroup_id, None)
            self._made = win.made(call.call_id)  # only the live ones: bounded by the cgroup
            if win.gated and gate is not None:  # every reader stopped under it goes on
                gate(self.cgroup_id, False)
                self._readers |= win.readers
                for pid in sorted(self._readers):
                    if pid not in win.killed:
                        win.signal(pid, signal.SIGCONT)
            if win._tree is not None and self.network_policy:
                win._tree.network_policy = list(self.network_policy)
            tree = win._tree
            if between is not None and tree is not None:
                if tree.stdio is not None:
                    tree.stdio.between_calls = between.requests
                tree.between = between.record()
            for t in (tree, tree.between if tree is not None else None):
                if t is not None and self.resolvers:
                    t.resolvers = list(self.resolvers)
                if t is not None:
                    t.host_network = self.host_network
                    mark_holders(t, self.cgroup_path)  # abstract names: the host's or its own
            if self.cgroup_id in mon._watched:  # until the next window: the between-call record
                feed = mon._feeds.get(self.cgroup_id)
                if feed is not None:
                    feed.rebase()  # the window's losses are its tree's: count from now
                mon._tails[self.cgroup_id] = tail = (
                    Tail.after(win)
                    if mon.config.workers
                    else Tail(mon, self.cgroup_id, self.cgroup_path)
                )
                if tail.feed is not None and not mon.config.workers:
                    tail.feed.begin(win)  # the between-call period starts (Tail.after: too)


class Monitor:
    def __init__(self, program: EventSource, config: MonitorConfig) -> None:
        self.program = program
        self.config = config
        self._windows: dict[int, Window] = {}
        self._watched: dict[int, int] = {}  # cgroup id -> number of watches
        self._paths: dict[int, str] = {}  # cgroup id -> its cgroup2 path, while watched
        self._error: BaseException | None = None
        self.events_total = 0
        self.events_unrouted = 0
        # per watched cgroup: what happens while no window is open (`Tail`)
        self._tails: dict[int, Tail] = {}
        self._feeds: dict[int, BetweenFeed] = {}  # per watched cgroup, once asked for

    def _on_record(self, raw: bytes) -> None:
        try:
            ev = self.program.decoder.decode(raw)
            self.events_total += 1
            win = self._windows.get(ev.cgroup_id)
            if win is None or ev.ts_ns < win.start_ns:
                self._between_windows(ev)
            else:
                win._on_event(ev)
        except Exception as exc:  # a ctypes callback must not raise: keep it for the reader
            if self._error is None:
                self._error = exc

    def _between_windows(self, ev: RawEvent) -> None:
        """An event of a watched cgroup outside any window: to its tail (what the server
        read, what workers did), for the next window's tree. Bounded per cgroup."""
        tail = self._tails.get(ev.cgroup_id)
        if tail is None:
            path = self._paths.get(ev.cgroup_id)
            if path is None:
                self.events_unrouted += 1
                return
            tail = self._tails[ev.cgroup_id] = Tail(self, ev.cgroup_id, path)
        tail._on_event(ev)

    def _check(self) -> None:
        if self._error is not None:
            raise MonitorLost(f"event decoding failed: {self._error!r}") from self._error

    def _drain(self) -> None:
        """Everything available now, synchronously (the aborted-window path)."""
        self.program.consume()
        self._check()

    async def _drain_async(self) -> None:
        """Everything available now, in batches with a checkpoint between them."""
        while self.program.consume(CONSUME_BATCH):
            self._check()
            await anyio.lowlevel.checkpoint()
        self._check()

    def drops(self) -> dict[str, int]:
        return self.program.drops()

    def lost(self, cgroup_id: int) -> dict[str, int] | None:
        """One cgroup's records lost in the kernel, per kind (`BpfProgram.lost`); None when
        the program cannot tell (an agent's that does not count per cgroup)."""
        lost = getattr(self.program, "lost", None)
        return lost(cgroup_id) if callable(lost) else None

    def stats(self) -> dict[str, object]:
        return {
            "drops": self.drops(),
            "events_total": self.events_total,
            "events_unrouted": self.events_unrouted,
            "load_ms": round(self.program.load_s * 1000, 1),
            "watched_cgroups": len(self._watched),
        }

    @asynccontextmanager
    async def watch(
        self, cgroup_id: int, cgroup_path: str, *, eager: bool = False
    ) -> AsyncIterator[Watch]:
        """`eager`: every open wakes the reader at once (online rules need each event now;
        by default opens wake it only every WAKE_EVERY-th record)."""
        if cgroup_id <= 0:
            raise MonitorError(f"no cgroup to watch (id {cgroup_id}, path {cgroup_path!r})")
        n = self._watched.get(cgroup_id, 0)
        self._watched[cgroup_id] = n + 1
        self._paths[cgroup_id] = cgroup_path
        if n == 0:
            self.program.add_cgroup(cgroup_id, eager=eager)
            # stdio integrity: the sandbox's stdin/stdout pipes, before its server runs
            self.program.wire_add(cgroup_id, stdio_pipes(cgroup_path))
        try:
            yield Watch(self, cgroup_id, cgroup_path, eager)
        finally:
            left = self._watched.pop(cgroup_id) - 1
            if left:
                self._watched[cgroup_id] = left
            else:
                self._tails.pop(cgroup_id, None)
                self._feeds.pop(cgroup_id, None)
                self._paths.pop(cgroup_id, None)
                self.program.remove_cgroup(cgroup_id)
                self.program.unprotect(cgroup_id)
                self.program.wire_forget(cgroup_id)

    async def _read(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        while True:
            await anyio.wait_readable(self.program.ring_fd)  # level-triggered: a batch cut
            self.program.consume(CONSUME_BATCH)  # short by the limit comes straight back
            self._check()


@asynccontextmanager
async def open_monitor(
    config: MonitorConfig | None = None, *, program: EventSource | None = None
) -> AsyncIterator[Monitor]:
    """Load the BPF program (once per process) and run the reader until exit.

    One monitor per program at a time: it owns the ring buffer's reader. Share it (one per
    guard process) rather than opening a second one. `program`: another source of the
    records (an agent's, `agent.client.RemoteProgram`), owned by the caller.
    """
    config = config or MonitorConfig()
    if program is None:
        program = load_program(config.ring_pages)
    if program.has_sink():
        raise MonitorError("a monitor is already open in this process; share it")
    monitor = Monitor(program, config)
    program.set_sink(monitor._on_record)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(monitor._read)
            try:
                yield monitor
            finally:
                tg.cancel_scope.cancel()
    finally:
        program.set_sink(None)
        for cgroup_id in list(monitor._watched):
            program.remove_cgroup(cgroup_id)
