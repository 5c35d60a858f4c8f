"""Which guard owns a container, and removal of containers whose guard is gone.

Every container carries `io.mtguard.owner = <boot id>:<pid>:<start time>` of the guard
process that made it. A guard killed with SIGKILL cannot clean up; the next guard to start
(or `mtguard sandbox prune`) removes every container whose owner is no longer alive, so
nothing leaks across crashes. Pid reuse cannot fool it: the start time must match too.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import anyio

from .engine import DockerEngine

OWNER_LABEL = "io.mtguard.owner"
_pruned: set[str] = set()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime), counted after the parenthesised command name.
    return stat.rsplit(")", 1)[1].split()[19]


def token_of(pid: int) -> str:
    return f"{_boot_id()}:{pid}:{_start_time(pid)}"


@cache
def owner_token() -> str:
    return token_of(os.getpid())


def owner_alive(token: str) -> bool:
    try:
        boot, pid, start = token.split(":")
    except ValueError:
        return False
    return boot == _boot_id() and _start_time(int(pid)) == start


async def prune_stale(engine: DockerEngine, *, force: bool = False) -> list[str]:
    """Remove containers whose owning guard is dead (once per process unless forced)."""
    if engine.socket in _pruned and not force:
        return []
    _pruned.add(engine.socket)
    removed = []
    for c in await engine.list_containers([OWNER_LABEL]):
        token = c.get("Labels", {}).get(OWNER_LABEL, "")
        if not owner_alive(token):
            with anyio.CancelScope(shield=True):
                await engine.remove(c["Id"])
            removed.append(c["Id"])
    return removed
