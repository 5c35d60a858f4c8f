"""Find a process's cgroup v2 directory and id, and list the pids in it.

Works on hybrid hosts (cgroup2 at /sys/fs/cgroup/unified, cgroupfs driver: `docker/<id>`) and
pure v2 hosts (`/sys/fs/cgroup/system.slice/docker-<id>.scope` with systemd). The id that
`bpf_get_current_cgroup_id()` returns is the inode number of that directory.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import msgspec

from ..errors import SandboxError


class Cgroup(msgspec.Struct, frozen=True):
    path: str  # absolute directory in the cgroup2 mount
    id: int  # inode number == bpf_get_current_cgroup_id()

    def pids(self) -> list[int]:
        try:
            text = Path(self.path, "cgroup.procs").read_text()
        except FileNotFoundError:
            return []
        return [int(line) for line in text.split()]


@cache
def cgroup2_mount() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return left.split()[4]
    raise SandboxError("no cgroup2 file system is mounted; the eBPF cgroup filter needs cgroup v2")


def cgroup_of_pid(pid: int) -> Cgroup:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except FileNotFoundError as exc:
        raise SandboxError(f"process {pid} is gone; cannot resolve its cgroup") from exc
    for line in lines:
        if line.startswith("0::"):
            rel = line[3:].lstrip("/")
            path = os.path.join(cgroup2_mount(), rel)
            return Cgroup(path=path, id=os.stat(path).st_ino)
    raise SandboxError(f"process {pid} has no cgroup v2 membership (no '0::' line)")
