"""Who holds an abstract AF_UNIX name the sandbox connected to, under the host's network.

An abstract name lives in a network namespace: a sandbox with its own has only its own
names, one sharing the host's (`--network host`, `--allow-domain`) reaches the host's
daemons by name. Binds are not traced, so once a call settled `mark_holders(tree, cgroup)`
looks each name up in /proc/net/unix (the guard's namespace is then the sandbox's) and
compares the sockets bound to it with the sockets the cgroup's processes hold: "own" (the
sandbox bound it: a browser's IPC), "host" (another program), "gone" (nobody binds it now:
an ephemeral socket of the sandbox's, most likely; not judged). Only when such a connect
happened: one read of /proc/net/unix and of the cgroup's fd tables.
"""

from __future__ import annotations

import os

from ..model import BehaviorTree
from .procfs import cgroup_pids

NET_UNIX = "/proc/net/unix"


def bound_inodes(names: set[str], table: str = NET_UNIX) -> dict[str, set[int]]:
    """The socket inodes bound to each abstract name (`@name`, as /proc/net/unix shows it)."""
    out: dict[str, set[int]] = {}
    try:
        with open(table) as fh:
            next(fh, None)  # the header
            for line in fh:
                parts = line.split()
                if len(parts) >= 8 and parts[7] in names and parts[6].isdigit():
                    out.setdefault(parts[7], set()).add(int(parts[6]))
    except OSError:
        pass
    return out


def held_sockets(pids: list[int]) -> set[int]:
    """The socket inodes the processes hold open (their fd tables)."""
    out: set[int] = set()
    for pid in pids:
        base = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(base)
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                target = os.readlink(f"{base}/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                out.add(int(target[8:-1]))
    return out


def mark_holders(tree: BehaviorTree, cgroup_path: str) -> None:
    """Set `UnixEvent.holder` on each successful abstract connect of a host-network tree."""
    if not tree.host_network:
        return
    events = [u for p in tree.processes for u in p.unix if u.abstract and u.result >= 0]
    if not events:
        return
    bound = bound_inodes({u.path for u in events})
    own = held_sockets(cgroup_pids(cgroup_path)) if bound else set()
    for u in events:
        inodes = bound.get(u.path)
        u.holder = "gone" if not inodes else "own" if inodes & own else "host"
