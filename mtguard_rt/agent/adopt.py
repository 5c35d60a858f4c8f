"""The sandboxes a dead guard left: found by their owner label and removed, never adopted.

Every sandbox carries `io.mtguard.owner = <boot id>:<pid>:<start time>` of the guard that
made it (sandbox/lifecycle.py). A starting agent removes every one whose owner is gone (the
guard and a previous agent SIGKILLed together leave its container running, unwatched). A
guard's connection that ends while it still watches a sandbox (a SIGKILLed proxy: a guard's
own exit gives its cgroups back first) gets the same sweep for that one owner once the
process is dead. Removal, not adoption: the server's stdio
belonged to the dead guard, so no one can speak MCP to it again, and a sandbox nobody
audits must not run on.
"""

from __future__ import annotations

import logging
import os

import anyio

from ..errors import GuardError
from ..sandbox.engine import open_engine
from ..sandbox.lifecycle import OWNER_LABEL, owner_alive, token_of

DOCKER_BOUND_S = 60.0  # list + removals on a loaded host (a removal kills and waits)
EXIT_WAIT_S = 30.0  # a guard whose connection ended is exiting: its death, bounded
_log = logging.getLogger(__name__)


async def remove_orphans(only_owner: str | None = None) -> list[str]:
    """Remove the sandboxes whose owning guard is dead (only `only_owner`'s when given);
    their ids. Docker unreachable: logged, nothing removed (the next start retries)."""
    removed: list[str] = []
    try:
        with anyio.fail_after(DOCKER_BOUND_S):
            async with open_engine() as engine:
                for c in await engine.list_containers([OWNER_LABEL]):
                    token = (c.get("Labels") or {}).get(OWNER_LABEL, "")
                    if only_owner is not None and token != only_owner:
                        continue
                    if owner_alive(token) and not _zombie(token):
                        continue
                    with anyio.CancelScope(shield=True):
                        await engine.remove(c["Id"])
                    removed.append(c["Id"])
                    names = ",".join(c.get("Names") or []) or c["Id"][:12]
                    _log.warning("removed sandbox %s of dead guard %s", names, token)
    except (GuardError, TimeoutError) as exc:
        _log.warning("could not sweep orphaned sandboxes: %s", exc)
    return removed


def _zombie(token: str) -> bool:
    """A dead guard its parent has not reaped yet still has its /proc/<pid>/stat."""
    try:
        pid = int(token.split(":")[1])
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return False


class PeerExit:
    """A connected guard's identity, pinned at connect time (a pidfd: no pid reuse)."""

    def __init__(self, pid: int) -> None:
        self.token = token_of(pid)
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except OSError:  # gone already, or no pidfd: the token's start time still pins it
            self._fd = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def sweep(self) -> list[str]:
        """Once the peer is dead (bounded): remove the sandboxes it left. A peer that lives
        on (it closed the connection and went in-process, or stopped guarding) keeps its."""
        try:
            if self._fd is not None:
                with anyio.move_on_after(EXIT_WAIT_S):
                    await anyio.wait_readable(self._fd)  # a pidfd reads ready at its exit
        finally:
            self.close()
        if owner_alive(self.token) and not _zombie(self.token):
            return []
        return await remove_orphans(self.token)
