"""FsState: lexical resolution, dirfds, unknown bases, escaping."""

from __future__ import annotations

from mtguard_rt.monitor.paths import AT_FDCWD, FsState


def test_resolution_rules() -> None:
    fs = FsState("/home/u", {4: "/var/lib"})
    assert fs.resolve(AT_FDCWD, b"a/../b/./c") == ("/home/u/b/c", True)
    assert fs.resolve(AT_FDCWD, b"/etc//passwd") == ("/etc/passwd", True)
    assert fs.resolve(4, b"../log/x") == ("/var/log/x", True)
    assert fs.resolve(4, b"") == ("/var/lib", True)
    assert fs.resolve(9, b"x") == ("x", False)
    assert fs.resolve(9, b"") == ("fd:9", False)
    assert fs.resolve(AT_FDCWD, b"/very/long", truncated=True) == ("/very/long", False)
    assert FsState(None).resolve(AT_FDCWD, b"rel") == ("rel", False)
    assert fs.resolve(AT_FDCWD, b"\xff\xfe") == ("/home/u/\\xff\\xfe", True)


def test_fork_copies_and_fd_updates() -> None:
    fs = FsState("/a", {3: "/a/d"})
    child = fs.fork()
    child.closed(3)
    child.cwd = "/b"
    assert fs.fds == {3: "/a/d"} and fs.cwd == "/a"
    fs.duped(3, 7)
    assert fs.fd_path(7) == ("/a/d", True)
    fs.duped(99, 7)
    assert fs.fd_path(7) == ("fd:7", False)
    fs.opened(5, "rel", False)
    assert 5 not in fs.fds
