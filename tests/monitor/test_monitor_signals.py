"""Real eBPF: links and signals in the tree (kill, tkill, tgkill, pidfd_send_signal,
rt_sigqueueinfo, rt_tgsigqueueinfo), in a fresh cgroup (host pid namespace; the sandbox's
own namespace is covered by tests/monitor/test_monitor_docker.py)."""

from __future__ import annotations

import os
import sys

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from monitor_harness import CALL, all_files, gated_cgroup, traced

from mtguard_rt.model import BehaviorTree, DeclaredCall, SignalEvent
from mtguard_rt.monitor import MonitorConfig, open_monitor

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]
PY = sys.executable


def signals(tree: BehaviorTree) -> list[SignalEvent]:
    return [s for p in tree.processes for s in p.signals]


async def test_symlinks_and_hard_links_with_dirfds_and_failures(
    tmp_path: os.PathLike[str],
) -> None:
    base = str(tmp_path)
    script = (
        "import os\n"
        "os.mkdir('ws')\n"
        "open('ws/data.txt', 'w').close()\n"
        "os.symlink('../outside/secret', 'ws/escape')\n"
        "d = os.open('ws', os.O_RDONLY | os.O_DIRECTORY)\n"
        "os.symlink('/etc/passwd', 'pw', dir_fd=d)\n"
        "os.link('ws/data.txt', 'ws/hard')\n"
        "os.link('data.txt', 'hard2', src_dir_fd=d, dst_dir_fd=d)\n"
        "try:\n"
        "    os.symlink('x', 'ws/escape')\n"
        "except FileExistsError:\n"
        "    pass\n"
    )
    tree = await traced([PY, "-c", script], cwd=base)
    links = [
        (f.op, f.path, f.target, f.result) for f in all_files(tree) if f.op in ("symlink", "link")
    ]
    assert links == [
        ("symlink", f"{base}/ws/escape", "../outside/secret", 0),  # the text as given
        ("symlink", f"{base}/ws/pw", "/etc/passwd", 0),  # dirfd-relative name
        ("link", f"{base}/ws/hard", f"{base}/ws/data.txt", 0),
        ("link", f"{base}/ws/hard2", f"{base}/ws/data.txt", 0),  # both dirfds
        ("symlink", f"{base}/ws/escape", "x", -17),  # EEXIST, recorded
    ]


CHILD_AND_THREADS = r"""
import ctypes, os, signal, subprocess, threading, time
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGUSR1, lambda *a: None)
signal.signal(signal.SIGUSR2, lambda *a: None)
def started(argv):  # a child that has exec'd its program (bounded wait)
    c = subprocess.Popen(argv)
    for _ in range(500):
        if os.readlink(f'/proc/{c.pid}/exe').endswith('/' + argv[0]):
            return c
        time.sleep(0.01)
    raise SystemExit('the child never exec\'d')
# a child started in this call, ended by its parent (a subprocess timeout does this)
c = started(['sleep', '30']); c.send_signal(signal.SIGTERM); c.wait()
# pidfd_send_signal to a child
c = started(['sleep', '30']); fd = os.pidfd_open(c.pid)
signal.pidfd_send_signal(fd, signal.SIGKILL); c.wait(); os.close(fd)
# a thread of its own (pthread_kill is tgkill), tkill to its own main thread
ev = threading.Event(); t = threading.Thread(target=ev.wait); t.start()
signal.pthread_kill(t.ident, signal.SIGUSR1); ev.set(); t.join()
assert libc.syscall(200, threading.get_native_id(), signal.SIGUSR2) == 0  # tkill
# rt_sigqueueinfo (sigqueue) and rt_tgsigqueueinfo to itself
class Val(ctypes.Union): _fields_ = [('i', ctypes.c_int), ('p', ctypes.c_void_p)]
assert libc.sigqueue(os.getpid(), signal.SIGUSR1, Val(i=7)) == 0
info = (ctypes.c_int * 32)(); info[0] = signal.SIGUSR2; info[2] = -1  # si_code SI_QUEUE
assert libc.syscall(297, os.getpid(), threading.get_native_id(), signal.SIGUSR2, info) == 0
# a probe, and a pid that does not exist
os.kill(os.getpid(), 0)
try:
    os.kill(4000000, signal.SIGTERM)
except ProcessLookupError:
    pass
"""


async def test_signals_to_children_threads_and_self() -> None:
    tree = await traced([PY, "-c", CHILD_AND_THREADS])
    (py,) = [p for p in tree.processes if p.learned == "seeded"]
    assert py.exit_code == 0
    by = {(s.syscall, s.name): s for s in signals(tree)}
    kills = [s for s in signals(tree) if s.syscall == "kill"]
    child_term = next(s for s in kills if s.name == "SIGTERM" and s.result == 0)
    assert child_term.relation == "descendant" and child_term.started_in_call
    assert child_term.delivered == 1 and child_term.target_argv == ["sleep", "30"]
    assert child_term.target_key is not None
    assert child_term.target_key in {p.key for p in tree.processes}
    pidfd = by[("pidfd_send_signal", "SIGKILL")]
    assert pidfd.pidfd and pidfd.relation == "descendant" and pidfd.target_argv == ["sleep", "30"]
    thread = by[("tgkill", "SIGUSR1")]
    assert thread.thread and thread.relation == "self" and thread.target_tid != thread.target_pid
    assert by[("tkill", "SIGUSR2")].relation == "self"
    assert by[("rt_sigqueueinfo", "SIGUSR1")].relation == "self"
    assert by[("rt_tgsigqueueinfo", "SIGUSR2")].relation == "self"
    probe = by[("kill", "0")]
    assert probe.signal == 0 and probe.delivered == 0 and probe.relation == "unknown"
    missing = next(s for s in kills if s.target_pid == 4000000)
    assert missing.result == -3 and missing.delivered == 0  # ESRCH
    assert tree.complete


async def test_signal_to_a_sibling_started_before_the_call_and_to_outside() -> None:
    outside = await anyio.open_process(["sleep", "60"])  # not in the cgroup
    killer = (
        "import os, signal, sys\n"
        "sib = int(sys.stdin.readline())\n"
        "os.kill(sib, signal.SIGKILL)\n"
        f"os.kill({outside.pid}, signal.SIGTERM)\n"
    )
    gate = f'sleep 60 & echo $!; read _; echo $! | exec {PY} -c "$0"'
    try:
        async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon, gated_cgroup() as cg:
            async with cg.run(["sh", "-c", gate, killer]) as proc, mon.watch(
                cg.id, str(cg.path)
            ) as watch:
                await cg.release(proc)
                sib_pid = int(await cg.line())  # the worker runs before the window opens
                async with watch.window(CALL) as window:
                    assert proc.stdin is not None
                    await proc.stdin.send(b"go\n")
                    with anyio.fail_after(10):
                        await proc.wait()
                    window.response_arrived()
        tree = window.tree
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            if outside.returncode is None:
                outside.kill()
            await outside.wait()
            await outside.aclose()
    (sib,) = [s for s in signals(tree) if s.name == "SIGKILL"]
    assert sib.relation == "sandbox" and not sib.started_in_call
    assert sib.target_pid == sib_pid and sib.target_argv == ["sleep", "60"]
    (out,) = [s for s in signals(tree) if s.name == "SIGTERM"]
    assert out.relation == "outside" and out.target_key is None
    assert out.target_host_pid == outside.pid and out.target_comm == "sleep"
    assert outside.returncode == -15  # it was signalled


async def test_a_worker_an_earlier_call_left_running_is_marked_started_by_that_call() -> None:
    """Call 1 starts a worker and returns; call 2 signals it: the tree says whose worker it
    is (`started_by`), while the process that was there before any call is not marked."""
    server = (
        "import os, signal, subprocess, sys\n"
        "pre = subprocess.Popen(['sleep', '61'])\n"
        "print('up', flush=True)\n"
        "sys.stdin.readline()\n"
        "w = subprocess.Popen(['sleep', '62'])\n"
        "print('one', flush=True)\n"
        "sys.stdin.readline()\n"
        "w.send_signal(signal.SIGTERM); pre.send_signal(signal.SIGTERM); w.wait(); pre.wait()\n"
        "print('two', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    one = DeclaredCall(call_id="call-1", server="test", tool="start")
    two = DeclaredCall(call_id="call-2", server="test", tool="stop")
    config = MonitorConfig(settle_max_ms=2000, workers=True)
    async with open_monitor(config) as mon, gated_cgroup() as cg:
        async with cg.run([PY, "-c", server]) as proc, mon.watch(cg.id, str(cg.path)) as watch:
            assert proc.stdin is not None
            await cg.release(proc)
            assert await cg.line() == b"up"
            async with watch.window(one) as w1:
                await proc.stdin.send(b"go\n")
                assert await cg.line() == b"one"
                w1.response_arrived()
            async with watch.window(two) as w2:
                await proc.stdin.send(b"go\n")
                assert await cg.line() == b"two"
                w2.response_arrived()
            await proc.stdin.send(b"end\n")
    assert len(w1.tree.workers) == 1
    by_argv = {tuple(s.target_argv): s for s in signals(w2.tree)}
    worker, pre = by_argv[("sleep", "62")], by_argv[("sleep", "61")]
    assert worker.target_started_by == "call-1" and not worker.started_in_call
    assert pre.target_started_by is None and pre.relation == worker.relation == "descendant"
    (node,) = [p for p in w2.tree.processes if p.key == worker.target_key]
    assert node.learned == "seeded" and node.started_by == "call-1"


async def test_the_kernel_places_a_dying_sibling_and_a_group_past_the_kept_targets() -> None:
    """Where a target was is the kernel's word as the signal is generated: a zombie of the
    sandbox (no snapshot lists it) is not outside, and its signal was ignored (unknown); a
    process group of six, one outside the cgroup past the four targets a record names, is
    outside (no silent evasion through a crowded group)."""
    leader_src = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('term', flush=True), os._exit(0)))\n"
        "os.setpgid(0, 0)\n"  # its own group, in the test's session: the cgroup may join it
        "print(os.getpid(), flush=True)\n"
        "time.sleep(60)\n"
    )
    outside = await anyio.open_process([PY, "-c", leader_src])  # not in the cgroup
    killer = (
        "import os, signal, sys, time\n"
        "pgid = int(sys.argv[1])\n"
        "z = os.fork()\n"
        "if z == 0:\n"
        "    os._exit(0)\n"
        "while open(f'/proc/{z}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z':\n"
        "    time.sleep(0.01)\n"
        "kids = []\n"
        "for _ in range(5):\n"
        "    r, w = os.pipe()\n"
        "    k = os.fork()\n"
        "    if k == 0:\n"
        "        os.setpgid(0, pgid)\n"
        "        os.write(w, b'x')\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    os.read(r, 1)\n"
        "    kids.append(k)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "os.kill(z, signal.SIGTERM)\n"  # the zombie: generated, ignored
        "os.killpg(pgid, signal.SIGTERM)\n"  # five of its own and the outside leader
        "for k in kids:\n"
        "    os.waitpid(k, 0)\n"
        "os.waitpid(z, 0)\n"
    )
    try:
        assert outside.stdout is not None
        said = BufferedByteReceiveStream(outside.stdout)
        with anyio.fail_after(20):
            pgid = int(await said.receive_until(b"\n", 64))
        async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon, gated_cgroup() as cg:
            async with cg.run([PY, "-c", killer, str(pgid)]) as proc, mon.watch(
                cg.id, str(cg.path)
            ) as watch:
                await cg.release(proc)
                with anyio.fail_after(20):
                    assert await cg.line() == b"ready"
                async with watch.window(CALL) as window:
                    assert proc.stdin is not None
                    await proc.stdin.send(b"go\n")
                    with anyio.fail_after(20):
                        await proc.wait()
                    window.response_arrived()
        tree = window.tree
        with anyio.fail_after(20):  # it was signalled (its exit status may be reaped by others)
            assert await said.receive_until(b"\n", 64) == b"term"
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            if outside.returncode is None:
                outside.kill()
            await outside.wait()
            await outside.aclose()
    zombie = next(s for s in signals(tree) if s.syscall == "kill" and s.target_pid > 0)
    assert zombie.delivered == 1 and zombie.target_key is None
    assert zombie.relation == "unknown"  # before the kernel's view: "outside"
    group = next(s for s in signals(tree) if s.target_pid < 0)
    assert group.delivered == 6
    assert group.relation == "outside" and not group.started_in_call
    assert any("outside the sandbox" in t for t in group.more_targets)
