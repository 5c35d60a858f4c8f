"""Whose process a seeded or carried-over process is, whatever the machine's load and pids.

A server's own worker (GitPython's `git cat-file --batch`, started by one call and ended by a
later one) must stay its descendant and keep the call that started it: when pids wrapped (a
child's pid below its parent's, so the snapshot lists it first), when the worker's fork record
was taken late (/proc's start time against the record's), and when it is ended between calls
(carried into the between-call period). Synthetic events and a real child process, no eBPF.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.audit import CallContext, load_policy
from mtguard_rt.audit.programs import alive_as
from mtguard_rt.audit.rules_process import process_control
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, DeclaredCall, ProcessNode
from mtguard_rt.monitor.builder import TreeBuilder
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import SIG_KILL, SIG_TARGETS, Kind
from mtguard_rt.monitor.procfs import SeedProcess, read_process, start_as_seeded
from mtguard_rt.monitor.window import Window, inherit_started_by

POLICY = load_policy()
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}
TASK = "Review the pending changes in my project and commit only the README fix"
GIT = "/usr/bin/git"
SERVER_ARGV = ["/srv/py/bin/python3", "/srv/py/bin/mcp-server-git"]
EARLIER = DeclaredCall(call_id="c1", server="git", tool="git_log",
                       arguments={"repo_path": "/ws/project", "max_count": 5})  # fmt: skip
NOW = DeclaredCall(call_id="c2", server="git", tool="git_add",
                   arguments={"repo_path": "/ws/project", "files": ["README.md"]})  # fmt: skip


def sigterm(sender: int, target: int, ts: int) -> RawEvent:
    """A delivered kill(target, SIGTERM) record (monitor.bpf.c's signals block)."""
    tgids = struct.pack(f"<{SIG_TARGETS}I", target, *([0] * (SIG_TARGETS - 1)))
    return RawEvent(ts_ns=ts, cgroup_id=7, kind=int(Kind.SIGNAL), pid=sender, a0=target,
                    a2=15, a3=SIG_KILL | 1 << 8 | target << 32, addr=tgids)  # fmt: skip


def verdict(tree: BehaviorTree, call: DeclaredCall = NOW) -> list[str]:
    ctx = CallContext(call=call, task=TASK, recent_calls=[EARLIER])
    found = process_control(ctx, TreeView.build(tree, POLICY, {}), RESULT, POLICY)
    return [line for v in found for line in v.evidence]


def test_a_worker_listed_before_its_server_after_pids_wrapped_is_the_servers_own() -> None:
    """pid_max is 32768 here: on a busy machine the counter wraps every few minutes, and a
    worker started after the wrap has a pid below its server's. The snapshot lists pids in
    order, so the worker is seeded before its parent: it must still be the server's."""
    b = TreeBuilder(NOW, 10_000)
    b.seed(SeedProcess(350, 32001, 900, GIT, ["git", "cat-file", "--batch"], "/ws", 1000))
    b.seed(SeedProcess(31990, 0, 100, "/sbin/docker-init", ["docker-init"], "/", 0))
    server = b.seed(SeedProcess(32001, 31990, 200, SERVER_ARGV[0], SERVER_ARGV, "/ws", 1000))
    worker = b._procs[350]
    worker.node.started_by = "c1"  # as the window marks it (the call that spawned it)
    b.apply(sigterm(32001, 350, 10_100))
    tree = b.build(10_200, [], {}, 0)
    (sig,) = [s for p in tree.processes for s in p.signals]
    assert worker.node.parent == server.node.key
    assert server.node.parent == tree.processes[1].key
    assert (sig.relation, sig.target_started_by) == ("descendant", "c1")
    assert verdict(tree) == []
    # a process the server did not start is still judged, whatever the order
    b = TreeBuilder(NOW, 10_000)
    b.seed(SeedProcess(350, 31990, 900, "/usr/bin/redis-server", ["redis-server"], "/", 1000))
    b.seed(SeedProcess(31990, 0, 100, "/sbin/docker-init", ["docker-init"], "/", 0))
    b.seed(SeedProcess(32001, 31990, 200, SERVER_ARGV[0], SERVER_ARGV, "/ws", 1000))
    b.apply(sigterm(32001, 350, 10_100))
    tree = b.build(10_200, [], {}, 0)
    (sig,) = [s for p in tree.processes for s in p.signals]
    assert sig.relation == "sandbox"
    assert "SIGTERM" in verdict(tree)[0]


def test_a_worker_ended_between_calls_is_still_the_one_a_call_started() -> None:
    """The window of c1 saw the worker forked; the worker is ended after c1's response: the
    between-call period carries it over (as the between feed and the tail do) with the call
    that started it, so the server ending its own helper is not control of another process."""
    win = TreeBuilder(EARLIER, 1_000)
    server = win.seed(SeedProcess(100, 1, 500, SERVER_ARGV[0], SERVER_ARGV, "/ws", 1000))
    win.apply(RawEvent(ts_ns=1_100, cgroup_id=7, kind=int(Kind.FORK), pid=100, a0=101))
    worker = win._procs[101]
    worker.node.exe, worker.node.argv = GIT, ["git", "cat-file", "--batch-check"]
    between = TreeBuilder(DeclaredCall(call_id="git-between-1", server="git", tool=""), 2_000)
    between.adopt(server, spawned=False, by="c1")
    carried = between.adopt(worker, spawned=True, by="c1")
    assert carried.node.started_by == "c1" and server.node.started_by is None
    again = TreeBuilder(EARLIER, 3_000).adopt(carried, spawned=True)  # the next cut
    assert again.node.started_by == "c1"
    between.apply(sigterm(100, 101, 2_500))
    tree = between.build(2_600, [], {}, 0)
    (sig,) = [s for p in tree.processes for s in p.signals]
    assert (sig.relation, sig.target_started_by, sig.started_in_call) == (
        "descendant", "c1", False)  # fmt: skip
    between_call = DeclaredCall(call_id="git-between-1", server="git", tool="(between calls)")
    assert verdict(tree, between_call) == []
    # the same signal to a process an earlier call ran on request stays the user's to stop
    asked = DeclaredCall(call_id="c1", server="git", tool="run",
                         arguments={"command": "git cat-file --batch-check"})  # fmt: skip
    ctx = CallContext(call=between_call, task=TASK, recent_calls=[asked])
    assert process_control(ctx, TreeView.build(tree, POLICY, {}), RESULT, POLICY)


class _Monitor:
    """What a `Window` asks its monitor for before it is used (records lost in the kernel)."""

    def drops(self) -> dict[str, int]:
        return {}

    def lost(self, cgroup_id: int) -> dict[str, int] | None:
        return None  # unknown, as an agent's program says


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _window(call: DeclaredCall, cgroup: Path) -> Window:
    return Window(_Monitor(), 7, str(cgroup), call, 1000)  # type: ignore[arg-type]


@pytest.mark.parametrize("late_ms", [0, 200, 2_000])
def test_a_worker_whose_fork_record_came_late_is_still_marked_by_its_call(
    tmp_path: Path, child: subprocess.Popen[bytes], late_ms: int
) -> None:
    """/proc's start time is fixed when the process is created, the fork record's time when
    the tracepoint runs: on a loaded machine the second can come long after. The next
    window's seeding must still know the worker as the one call c1 started."""
    (tmp_path / "cgroup.procs").write_text("")
    seen = read_process(child.pid)
    assert seen is not None
    suspended = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    fork_ns = seen.start_ns - suspended + late_ms * 1_000_000  # the record's clock and delay
    one = _window(EARLIER, tmp_path)
    one._builder.apply(RawEvent(ts_ns=fork_ns, cgroup_id=7, kind=int(Kind.FORK),
                                pid=os.getpid(), a0=child.pid))  # fmt: skip
    made = one.made("c1")
    assert made[child.pid] == (seen.start_ns, "c1")
    (tmp_path / "cgroup.procs").write_text(f"{child.pid}\n")
    two = _window(NOW, tmp_path)
    two._seed(made)
    assert two._builder._procs[child.pid].node.started_by == "c1"
    assert alive_as(child.pid, fork_ns)  # the exec rules' identity check agrees


def test_a_pid_that_now_names_a_later_process_is_not_the_worker(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    """The same pid, but the process behind it began after the one the record saw (the worker
    ended and its pid was reused): not that call's worker, and not alive as it."""
    seen = read_process(child.pid)
    assert seen is not None
    suspended = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    earlier_ns = seen.start_ns - suspended - 5_000_000_000  # a process from 5 s before
    assert start_as_seeded(child.pid, earlier_ns) is None
    assert not alive_as(child.pid, earlier_ns)
    one = _window(EARLIER, tmp_path)
    one._builder.apply(RawEvent(ts_ns=earlier_ns, cgroup_id=7, kind=int(Kind.FORK),
                                pid=os.getpid(), a0=child.pid))  # fmt: skip
    assert child.pid not in one.made("c1")
    child.kill()
    child.wait(timeout=30)
    assert start_as_seeded(child.pid, seen.start_ns) is None  # gone


def test_a_child_of_an_earlier_calls_worker_seeded_unmarked_is_that_calls() -> None:
    # a browser an earlier call started forks a helper where no window saw it (the gap as a
    # window closes, under load): seeded unmarked, it is the worker's, as is its own child;
    # a process from before any call (the server, its start-up daemon) and its children stay
    # unmarked, and a mark a record gave is kept
    def node(pid: int, by: str | None = None) -> ProcessNode:
        return ProcessNode(key=f"{pid}@1", pid=pid, started_by=by)

    server, daemon, daemon_child = node(10), node(11), node(12)
    browser, helper, grandchild, other = node(20, "c1"), node(21), node(22), node(23, "c2")
    seeded = [(9, server), (10, daemon), (11, daemon_child), (10, browser),
              (21, grandchild), (20, helper), (20, other)]  # fmt: skip
    inherit_started_by(seeded)
    assert (server.started_by, daemon.started_by, daemon_child.started_by) == (None,) * 3
    assert (helper.started_by, grandchild.started_by, other.started_by) == ("c1", "c1", "c2")
