"""TreeBuilder logic on synthetic events: identity, seeding races, settling counts."""

from __future__ import annotations

from mtguard_rt.model import DeclaredCall
from mtguard_rt.monitor.builder import TreeBuilder, open_flags
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Flag, Kind
from mtguard_rt.monitor.paths import AT_FDCWD
from mtguard_rt.monitor.procfs import SeedProcess

CALL = DeclaredCall(call_id="c", server="s", tool="t")
START = 1_000


def ev(kind: Kind, pid: int, ts: int, **kw: object) -> RawEvent:
    return RawEvent(ts_ns=ts, cgroup_id=7, kind=int(kind), pid=pid, **kw)  # type: ignore[arg-type]


def seeded() -> TreeBuilder:
    b = TreeBuilder(CALL, START)
    b.seed(
        SeedProcess(
            10, 1, 500, "/usr/bin/python3", ["python3", "srv.py"], "/srv", 1000, {3: "/srv/data"}
        )
    )
    return b


def test_fork_exec_exit_and_live_spawned() -> None:
    b = seeded()
    assert b.live_spawned() == 0  # the seeded server never holds settling open
    b.apply(ev(Kind.FORK, 10, 1100, a0=11))
    assert b.live_spawned() == 1
    b.apply(ev(Kind.EXEC, 11, 1200, a0=AT_FDCWD, s1=b"/bin/ls", s2=b"ls\0-l", a1=6, a2=2))
    b.apply(ev(Kind.EXEC_RESULT, 11, 1201))
    b.apply(ev(Kind.EXIT, 11, 1300, a0=0x102, flags=int(Flag.HAS_CODE)))
    assert b.live_spawned() == 0
    tree = b.build(1400, [], {}, 0)
    child = tree.processes[1]
    assert (child.exe, child.argv, child.cwd, child.exit_code) == (
        "/bin/ls",
        ["ls", "-l"],
        "/srv",
        2,
    )
    assert child.parent == tree.processes[0].key and child.key == "11@1100"


def test_pid_reuse_gives_two_identities() -> None:
    b = seeded()
    b.apply(ev(Kind.FORK, 10, 1100, a0=11))
    b.apply(ev(Kind.EXIT, 11, 1150))
    b.apply(ev(Kind.FORK, 10, 1200, a0=11))
    tree = b.build(1300, [], {}, 0)
    keys = [p.key for p in tree.processes if p.pid == 11]
    assert keys == ["11@1100", "11@1200"]
    assert tree.processes[1].end_ns == 1150 and tree.processes[1].exit_code is None
    assert b.live_spawned() == 1


def test_fork_seen_after_seeding_converts_the_seeded_child() -> None:
    b = seeded()
    b.seed(SeedProcess(12, 10, 900, "/usr/bin/python3", ["python3", "srv.py"], "/srv", 1000))
    b.apply(ev(Kind.FORK, 10, 1050, a0=12))
    tree = b.build(1100, [], {}, 0)
    child = [p for p in tree.processes if p.pid == 12]
    assert len(child) == 1 and child[0].learned == "observed" and child[0].key == "12@1050"
    assert b.live_spawned() == 1


def test_fd_table_dup_close_and_unresolved_names() -> None:
    b = seeded()
    b.apply(ev(Kind.OPEN, 10, 1100, a0=3, s1=b"x.txt", a1=0, ret=5))  # dirfd 3 = /srv/data
    b.apply(ev(Kind.DUP, 10, 1101, a0=3, ret=8))
    b.apply(ev(Kind.OPEN, 10, 1102, a0=8, s1=b"y", a1=0o1101, a2=0o644, ret=6))
    b.apply(ev(Kind.CLOSE, 10, 1103, a0=3))
    b.apply(ev(Kind.OPEN, 10, 1104, a0=3, s1=b"z", ret=-9))
    b.apply(ev(Kind.CHMOD, 10, 1105, a3=6, a2=0o755, flags=int(Flag.BYFD)))
    b.apply(ev(Kind.CHDIR, 10, 1106, s1=b"../etc"))
    b.apply(ev(Kind.OPEN, 10, 1107, a0=AT_FDCWD, s1=b"passwd", ret=9))
    files = b.build(1200, [], {}, 0).processes[0].files
    got = [(f.op, f.path, f.resolved) for f in files]
    assert got == [
        ("open", "/srv/data/x.txt", True),
        ("open", "/srv/data/y", True),
        ("open", "z", False),  # its dirfd was closed: kept raw, never guessed
        ("chmod", "/srv/data/y", True),
        ("chdir", "/etc", True),
        ("open", "/etc/passwd", True),
    ]
    assert files[1].flags == ["write", "create", "truncate"] and files[1].mode == 0o644


def test_an_exec_of_a_memfd_names_the_memfd_without_proc() -> None:
    # fexecve of a memfd: the exec's name is empty, the fd table (memfd_create) names it, so
    # the tree says what ran even when the process is gone before /proc could be read
    b = seeded()
    b.apply(ev(Kind.MEMFD, 10, 1100, s1=b"helper", ret=8))
    b.apply(ev(Kind.FORK, 10, 1101, a0=11))
    b.apply(ev(Kind.EXEC, 11, 1102, a0=8, s1=b"", s2=b"sh\0-c\0echo hi", a1=18, a2=3))
    b.apply(ev(Kind.EXEC_RESULT, 11, 1103))
    b.apply(ev(Kind.CLOSE, 10, 1104, a0=8))
    b.apply(ev(Kind.EXEC, 10, 1105, a0=8, s1=b"", s2=b"sh", a1=2, a2=1))  # closed: unnamed
    procs = b.build(1200, [], {}, 0).processes
    assert procs[1].exe == "/memfd:helper" and procs[1].argv == ["sh", "-c", "echo hi"]
    assert [x.path for x in procs[0].execs] == ["fd:8"]


def test_open_flags() -> None:
    assert open_flags(0) == ["read"]
    assert open_flags(0o2 | 0o100) == ["read", "write", "create"]
    assert open_flags(0o1 | 0o1000) == ["write", "truncate"]


def test_unknown_process_is_observed_and_dns_of_unknown_pid_unattributed() -> None:
    b = TreeBuilder(CALL, START)
    b.apply(ev(Kind.OPEN, 77, 1100, a0=AT_FDCWD, s1=b"/etc/shadow", ret=-13))
    assert b.live_spawned() == 1  # appeared mid-window: new activity
    query = bytes.fromhex("12340100000100000000000003777777076578616d706c6503636f6d0000010001")
    b.apply(
        ev(
            Kind.DNS_SEND,
            88,
            1200,
            a0=4,
            a1=2,
            a2=53,
            addr=bytes([127, 0, 0, 1]) + bytes(12),
            s1=query,
        )
    )
    tree = b.build(1300, [], {}, 0)
    assert tree.processes[0].files[0].path == "/etc/shadow"
    assert [(d.name, d.pid, d.server) for d in tree.dns] == [
        ("www.example.com", 88, "127.0.0.1:53")
    ]


def test_blind_spot_makes_the_tree_incomplete() -> None:
    b = seeded()
    b.apply(ev(Kind.BLIND, 10, 1100, a0=1))
    tree = b.build(1200, [], {}, 0)
    assert not tree.complete
    assert tree.incomplete_reasons == [
        "process 10 (/usr/bin/python3) called io_uring_setup: operations through it are not traced"
    ]


def test_an_exec_straddling_the_window_start_takes_the_program_from_proc() -> None:
    """The exec's enter record came before the window, the snapshot before it took effect:
    its successful exit in the window makes the builder read what runs now."""
    now = SeedProcess(7, 1, 500, "/usr/bin/sleep", ["sleep", "60"], "/", 1000)
    b = TreeBuilder(DeclaredCall(call_id="c", server="s", tool="t"), 1000,
                    lookup=lambda pid: now if pid == 7 else None)  # fmt: skip
    b.seed(SeedProcess(7, 1, 500, "/usr/bin/sh", ["sh", "-c", "x"], "/", 1000))
    b.apply(RawEvent(ts_ns=1001, cgroup_id=1, kind=int(Kind.EXEC_RESULT), pid=7, uid=1000))
    (node,) = b.build(2000, [], {}, 0).processes
    assert (node.exe, node.argv) == ("/usr/bin/sleep", ["sleep", "60"])
    reused = SeedProcess(7, 1, 900, "/usr/bin/sleep", ["sleep", "60"], "/", 1000)
    b = TreeBuilder(DeclaredCall(call_id="c", server="s", tool="t"), 1000,
                    lookup=lambda pid: reused)  # fmt: skip
    b.seed(SeedProcess(7, 1, 500, "/usr/bin/sh", ["sh", "-c", "x"], "/", 1000))
    b.apply(RawEvent(ts_ns=1001, cgroup_id=1, kind=int(Kind.EXEC_RESULT), pid=7, uid=1000))
    assert b.build(2000, [], {}, 0).processes[0].argv == ["sh", "-c", "x"]  # another process
