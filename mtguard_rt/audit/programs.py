"""`CallPrograms`: what each exec of one call really ran (`identity.identify`), shared by
the online and the post exec rules through the call's context (`programs_of`).

Online, an exec is identified as it happens: the process is alive, `/proc/<pid>/exe` is what
the kernel runs and `/proc/<pid>/root` the sandbox's files. After the call an exec not seen
online is identified from the tree and the files of a sandbox process still alive. A file
the call wrote before the exec (or an earlier call made: `madefiles.SandboxFiles`) is `made`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..model import BehaviorTree, ExecEvent, FileEvent, ProcessNode
from .identity import Program, Where, identify
from .madefiles import SandboxFiles, events_in_order
from .policy import Policy

if TYPE_CHECKING:
    from .context import CallContext
    from .treeview import TreeView

_NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
MAX_ROOTS = 8  # live processes remembered to reach the sandbox's root through


def alive_as(pid: int, start_ns: int) -> bool:
    """The host process `pid` is still the one that started at `start_ns` (no pid reuse):
    /proc's start (clock ticks since boot, suspend included) is fixed before the fork record
    is taken, so it is no later than `start_ns` (a tick: the record clock's lag) however late
    load made that record; a reused pid names a process that began after it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    rest = raw[raw.rfind(b")") + 2 :].split()
    suspended = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    return int(rest[19]) * _NS_PER_TICK - suspended <= start_ns + _NS_PER_TICK


def _written(ev: FileEvent) -> list[str]:
    """The paths whose content one successful file event wrote or put in place."""
    if ev.result < 0 or not ev.path.startswith("/"):
        return []
    if ev.op == "open":
        return [ev.path] if not {"write", "create", "truncate"}.isdisjoint(ev.flags) else []
    if ev.op in ("rename", "link") and ev.target:
        return [ev.path if ev.op == "link" else ev.target]
    return []


class CallPrograms:
    """The programs of one call's execs. Online, each exec is identified as it happens
    (`seen()`: the process is alive, its `/proc/<pid>/exe` is what runs); after the call,
    `of()` gives that, or identifies it from the tree and the sandbox's files then. `made`
    is a `madefiles.SandboxFiles` of earlier calls (None: not known)."""

    def __init__(self, policy: Policy, made: SandboxFiles | None) -> None:
        self.policy = policy
        self._earlier = made
        self._written: dict[str, int] = {}  # path -> first write in this call (online)
        self._roots: list[tuple[int, int]] = []  # (pid, start_ns) that showed a sandbox root
        self.programs: dict[tuple[str, int], Program] = {}
        self.cost_ns = 0  # time spent identifying online
        self._tree: BehaviorTree | None = None  # the tree `_tree_written` was read from
        self._tree_written: dict[str, int] = {}
        self._tree_root: str | None = None

    def _made(self, written: dict[str, int], before_ns: int) -> Callable[[str], bool]:
        def made(path: str) -> bool:
            when = written.get(path)
            if when is not None and when <= before_ns:
                return True
            return self._earlier is not None and self._earlier.made(path)
        return made

    def _root(self, pid: int, start_ns: int) -> str | None:
        """The sandbox's root through `pid` if it is alive, else through one that was."""
        if alive_as(pid, start_ns):
            if (pid, start_ns) not in self._roots:
                self._roots = [*self._roots[-(MAX_ROOTS - 1) :], (pid, start_ns)]
            return f"/proc/{pid}/root"
        while self._roots:
            p, s = self._roots[-1]
            if alive_as(p, s):
                return f"/proc/{p}/root"
            self._roots.pop()  # gone: never asked again
        return None

    def wrote(self, ev: FileEvent) -> None:
        """Online: a file event of the call, in time order."""
        for path in _written(ev):
            self._written.setdefault(path, ev.ts_ns)

    def seen(self, proc: ProcessNode, ev: ExecEvent, before: str | None) -> Program:
        """Online: a successful exec of `proc`, as it happens."""
        t0 = time.perf_counter_ns()
        root = self._root(proc.pid, proc.start_ns)
        where = Where(root, proc.pid if root else None, proc.cwd, before,
                      self._made(self._written, ev.ts_ns))
        prog = identify(ev.path, ev.argv or [ev.path], where, self.policy)
        self.programs[(proc.key, ev.ts_ns)] = prog
        self.cost_ns += time.perf_counter_ns() - t0
        return prog

    def of(self, view: TreeView, p: ProcessNode, exe: str, argv: list[str]) -> Program:
        """After the call: the program of one of `view.execs`."""
        ev = next((e for e in p.execs if e.result == 0 and e.path == exe), None)
        ts = ev.ts_ns if ev is not None else 0
        got = self.programs.get((p.key, ts))
        if got is not None:
            return got
        if self._tree is not view.tree:  # once per tree: what it wrote, a live root
            self._tree = view.tree
            self._tree_written = {}
            for fe in events_in_order(view.tree):
                for path in _written(fe):
                    self._tree_written.setdefault(path, fe.ts_ns)
            self._tree_root = next((r for q in view.tree.processes if q.end_ns is None
                                    and (r := self._root(q.pid, q.start_ns))), None)  # fmt: skip
        before = _before(view, p, ev)
        made = self._made(self._tree_written, ts or 1 << 62)
        where = Where(self._tree_root, None, p.cwd, before, made)
        prog = identify(exe, argv, where, self.policy)
        self.programs[(p.key, ts)] = prog
        return prog


def _before(view: TreeView, p: ProcessNode, ev: ExecEvent | None) -> str | None:
    """The program `p` ran before the exec `ev`: its previous exec, else its parent's."""
    done = [e for e in p.execs if e.result == 0]
    if ev is not None and ev in done:
        i = done.index(ev)
        if i > 0:
            return done[i - 1].path
    parent = view.by_key.get(p.parent or "")
    return parent.exe if parent is not None else None


def programs_of(ctx: CallContext, policy: Policy) -> CallPrograms:
    """The call's `CallPrograms`, shared by the online and the post rules (on the context)."""
    got = ctx.programs
    if not isinstance(got, CallPrograms):
        files = getattr(ctx.baseline, "files", None)
        got = ctx.programs = CallPrograms(policy, files if isinstance(files, SandboxFiles)
                                          else None)  # fmt: skip
    return got
