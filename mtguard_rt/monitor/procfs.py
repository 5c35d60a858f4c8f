"""Snapshot of processes that already exist in a cgroup, read from /proc (the seeding step).

Paths are given as the process sees them: readlink of /proc/<pid>/cwd|exe|fd/* answers in
the reader's mount namespace, so the container root's prefix (from /proc/<pid>/root) is
stripped. Every read tolerates the process vanishing mid-read (it returns None or skips).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK")
_NS_PER_TICK = 1_000_000_000 // CLK_TCK


@dataclass
class SeedProcess:
    pid: int
    ppid: int
    start_ns: int  # boot-relative, from /proc/<pid>/stat starttime
    exe: str
    argv: list[str]
    cwd: str | None
    uid: int | None
    fds: dict[int, str] = field(default_factory=dict)


def cgroup_pids(cgroup_path: str) -> list[int]:
    """Host pids in the cgroup (its cgroup.procs); [] if the cgroup is gone."""
    try:
        with open(os.path.join(cgroup_path, "cgroup.procs")) as fh:
            return sorted(int(line) for line in fh if line.strip())
    except (FileNotFoundError, ProcessLookupError):
        return []


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _in_root(path: str | None, root: str) -> str | None:
    """A host-view path -> the process's view, given its root's host-view path."""
    if path is None or root in ("", "/"):
        return path
    if path == root:
        return "/"
    if path.startswith(root + "/"):
        return path[len(root) :]
    return path


def stat_fields(pid: int) -> tuple[int, int] | None:
    """(ppid, start_ns) from /proc/<pid>/stat, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()  # comm may hold spaces and ')'
    return int(rest[1]), int(rest[19]) * _NS_PER_TICK


def boot_offset_ns() -> int:
    """CLOCK_BOOTTIME minus CLOCK_MONOTONIC: how long the host was suspended. /proc's start
    times count it; the monitor's records (bpf_ktime_get_ns) and windows do not."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()


def start_as_seeded(pid: int, began_by_ns: int) -> int | None:
    """The `start_ns` a snapshot will read for `pid`, if it is the process that began by
    `began_by_ns` (monotonic, e.g. its fork record's time); None when it is gone or its pid
    names a later process. A process's /proc start is fixed when it is created, before its
    fork record, so this holds however late that record was taken (a loaded machine); a pid
    reused since names a process that began after the old one ended."""
    st = stat_fields(pid)
    if st is None:
        return None
    if st[1] - boot_offset_ns() > began_by_ns + _NS_PER_TICK:  # a tick: the fast clock's lag
        return None
    return st[1]


def read_process(pid: int, with_fds: bool = True) -> SeedProcess | None:
    st = stat_fields(pid)
    if st is None:
        return None
    base = f"/proc/{pid}"
    root = _readlink(f"{base}/root") or "/"
    try:
        with open(f"{base}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        cmdline = b""
    argv = [a.decode("utf-8", "backslashreplace") for a in cmdline.split(b"\0")[:-1]]
    uid: int | None = None
    try:
        with open(f"{base}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    break
    except OSError:
        pass
    fds: dict[int, str] = {}
    if with_fds:
        try:
            names = os.listdir(f"{base}/fd")
        except OSError:
            names = []
        for name in names:
            target = _in_root(_readlink(f"{base}/fd/{name}"), root)
            if target and target.startswith("/"):
                fds[int(name)] = target
    return SeedProcess(
        pid=pid,
        ppid=st[0],
        start_ns=st[1],
        exe=_in_root(_readlink(f"{base}/exe"), root) or "",
        argv=argv,
        cwd=_in_root(_readlink(f"{base}/cwd"), root),
        uid=uid,
        fds=fds,
    )


def snapshot(cgroup_path: str) -> list[SeedProcess]:
    """Every process of the cgroup that is alive now."""
    out = []
    for pid in cgroup_pids(cgroup_path):
        proc = read_process(pid)
        if proc is not None:
            out.append(proc)
    return out


def stdio_pipes(cgroup_path: str) -> dict[tuple[int, int], int]:
    """(pid, fd) -> stream (0 stdin, 1 stdout) for fd 0 and fd 1 of the cgroup's processes
    that are pipes: a sandbox's MCP wire before its server runs (the kernel follows the fds
    from there, through dups and forks)."""
    out: dict[tuple[int, int], int] = {}
    for pid in cgroup_pids(cgroup_path):
        for fd in (0, 1):
            try:
                mode = os.stat(f"/proc/{pid}/fd/{fd}").st_mode
            except OSError:
                continue
            if stat.S_ISFIFO(mode):
                out[(pid, fd)] = fd
    return out
