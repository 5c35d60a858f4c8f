"""`SandboxFiles`: the paths whose content the sandboxed server made itself, over a session.

A file holds a user secret only if it existed before the sandbox touched it (the image home,
the workspace, a mount). The traced syscalls prove a path's content is the sandbox's own when
a successful open truncated it, when an open with O_CREAT made it after an open found it
missing (ENOENT, or it was unlinked), or when it lies in a directory a successful mkdir made
(a new directory is empty). A rename carries its source's standing to its target: a file
moved in from elsewhere is foreign, even inside a made directory. Blind spot: link(2) and
symlink(2) are not traced, so a link planted in a made directory is not seen (its name is
the planter's choice anyway: the same link under an ordinary name evades any path rule).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

from ..model import BehaviorTree, FileEvent


def _under(path: str, dirs: set[str]) -> bool:
    parts = path.split("/")
    return any("/".join(parts[:i]) in dirs for i in range(2, len(parts)))


def events_in_order(tree: BehaviorTree) -> list[FileEvent]:
    """Every file event of the tree, every process, in kernel time order."""
    return sorted((ev for p in tree.processes for ev in p.files), key=lambda ev: ev.ts_ns)


@dataclass
class SandboxFiles:
    """What the sandbox made (see the module docstring); one per server, fed every call."""

    dirs: set[str] = field(default_factory=set)  # a successful mkdir made them
    files: set[str] = field(default_factory=set)  # truncated or created after missing
    missing: set[str] = field(default_factory=set)  # found absent (ENOENT) or unlinked
    foreign: set[str] = field(default_factory=set)  # renamed in from content not made here

    def copy(self) -> SandboxFiles:
        return SandboxFiles(set(self.dirs), set(self.files), set(self.missing), set(self.foreign))

    def made(self, path: str) -> bool:
        """Is the content at `path` (now) the sandbox's own?"""
        if path in self.files:
            return True
        if path in self.foreign or _under(path, self.foreign):
            return False
        return _under(path, self.dirs)

    def step(self, ev: FileEvent) -> None:
        """Account for one event, in time order."""
        if not ev.path.startswith("/"):
            return  # an unresolved name: no standing either way
        path = ev.path.rstrip("/") or "/"
        if ev.result < 0:
            if ev.op == "open" and ev.result == -errno.ENOENT:
                self.missing.add(path)
            return
        if ev.op == "mkdir":
            self.dirs.add(path)
            self.foreign.discard(path)
        elif ev.op == "rmdir":
            self.dirs.discard(path)
        elif ev.op == "unlink":
            self.files.discard(path)
            self.foreign.discard(path)
            self.missing.add(path)
        elif ev.op == "rename" and ev.target and ev.target.startswith("/"):
            target = ev.target.rstrip("/") or "/"
            own = self.made(path)
            self._forget(path)
            self.missing.add(path)
            self._forget(target)
            (self.files if own else self.foreign).add(target)
        elif ev.op == "open":
            fresh = "truncate" in ev.flags or ("create" in ev.flags and path in self.missing)
            if fresh:
                self.files.add(path)
                self.foreign.discard(path)
            self.missing.discard(path)

    def _forget(self, path: str) -> None:
        self.files.discard(path)
        self.foreign.discard(path)
        self.missing.discard(path)

    def record(self, tree: BehaviorTree) -> None:
        """Account for a whole call's tree (after its rules ran)."""
        for ev in events_in_order(tree):
            self.step(ev)
