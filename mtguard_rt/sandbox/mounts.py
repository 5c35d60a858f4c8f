"""Host-side mounts a sandbox needs: idmapped binds and per-server package overlays.

An *idmapped* bind shows a directory owned by host uid O as owned by the sandbox user U
(kernel idmapped mounts: open_tree + mount_setattr(MOUNT_ATTR_IDMAP) with a user namespace
mapping O -> U), so a server runs as an unprivileged user in a project root owns, and what
it creates is stored as O: the host's ownership never changes. A *package overlay* puts an
overlayfs over a read-only package directory with the upper layer in the server's state
dir, so a server writing beside its code works and its writes persist per server.
Each mount is made at a staging path under `RUNTIME_DIR/<owner>/` that Docker binds into
the container; `MountSet.close()` detaches them (the container keeps its own copies), and
`prune_mounts()` detaches those a dead guard left. Blocking: call from a worker thread.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
from pathlib import Path
from typing import NamedTuple

from ..errors import SandboxError
from .lifecycle import owner_alive, owner_token

RUNTIME_DIR = Path("/run/mtguard/mounts")
# syscall numbers of the new mount API: the same on every architecture (asm-generic)
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
MNT_DETACH = 2
CLONE_NEWUSER = 0x10000000
USERNS_TIMEOUT_S = 10.0  # the helper that holds the namespace lives only until it is opened

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def _check(result: int, what: str, path: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", path)
    return result


def _unshare_user() -> None:  # runs in the helper child, before exec
    if _libc.unshare(CLONE_NEWUSER) != 0:
        os._exit(1)


def userns_fd(uid_from: int, uid_to: int, gid_from: int, gid_to: int) -> int:
    """An fd on a user namespace showing host uid `uid_from` as `uid_to` (and gids alike)."""
    helper = subprocess.Popen(  # Popen returns once exec succeeded: the namespace exists
        ["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        preexec_fn=_unshare_user, close_fds=True,
    )  # fmt: skip
    try:
        # A namespace's "inside" ids are what files on the mount carry; "outside" what the
        # sandbox sees (idmapped mounts map on-disk ids down through the namespace's map).
        Path(f"/proc/{helper.pid}/uid_map").write_text(f"{uid_from} {uid_to} 1\n")
        Path(f"/proc/{helper.pid}/gid_map").write_text(f"{gid_from} {gid_to} 1\n")
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        assert helper.stdin is not None
        helper.stdin.close()
        try:
            helper.wait(USERNS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


def idmapped_clone(source: str, target: str, ns_fd: int) -> None:
    """Clone the mount tree at `source` (a directory or a mount point), idmap it through
    `ns_fd` and attach it at `target` (an existing empty directory)."""
    fd = _check(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, source.encode(),
                              OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE),
                "open_tree", source)  # fmt: skip
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, ns_fd)
        _check(_libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE,
                             ctypes.byref(attr), ctypes.sizeof(attr)),
               "idmapped mount", source)  # fmt: skip
        _check(_libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(),
                             MOVE_MOUNT_F_EMPTY_PATH), "move_mount", target)  # fmt: skip
    finally:
        os.close(fd)


def overlay(lower: str, upper: str, work: str, target: str) -> None:
    for p in (lower, upper, work):
        if any(c in p for c in ",:\\"):
            raise SandboxError(f"cannot overlay {p!r}: overlayfs options cannot hold , : or \\")
    options = f"lowerdir={lower},upperdir={upper},workdir={work}".encode()
    _check(_libc.mount(b"overlay", target.encode(), b"overlay", 0, options), "overlay", lower)


def detach(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not a mount (any more): nothing to do
            raise OSError(err, os.strerror(err), target)


def _owner_dir() -> Path:
    return RUNTIME_DIR / owner_token().replace(":", "_")


class Overlay(NamedTuple):
    merged: str  # the staging mount on the host (what the container binds)
    lower: str  # the package directory, unchanged
    upper: str  # where the server's writes land (its state)
    inside: str  # the package directory's path inside the sandbox


class MountSet:
    """The staging mounts of one sandbox. `close()` detaches them all (idempotent)."""

    def __init__(self, name: str) -> None:
        self.root = _owner_dir() / name
        self.made: list[str] = []  # staging paths, in mount order
        self.overlays: list[Overlay] = []
        self._n = 0

    def _stage(self, what: str) -> str:
        self._n += 1
        path = self.root / f"{self._n}-{what}"
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        return str(path)

    def idmapped(self, source: str, owner: tuple[int, int], user: tuple[int, int]) -> str:
        """`source` shown as owned by `user` where it is owned by `owner`."""
        ns = userns_fd(owner[0], user[0], owner[1], user[1])
        try:
            target = self._stage("idmap")
            idmapped_clone(source, target, ns)
        finally:
            os.close(ns)
        self.made.append(target)
        return target

    def package_overlay(
        self,
        lower: str,
        state: str,
        owner: tuple[int, int],
        user: tuple[int, int],
        inside: str | None = None,
    ) -> str:
        """An overlay of `lower` whose writes land in `state`/upper. When `owner` (of
        `lower`) is someone else, the lower layer is an idmapped clone showing it as `user`'s
        (overlayfs takes idmapped layers; an overlay itself cannot be idmapped), so the
        server may write beside its code."""
        upper, work = os.path.join(state, "upper"), os.path.join(state, "work")
        for d in (state, upper, work):
            os.makedirs(d, mode=0o700, exist_ok=True)
        os.chown(upper, *user)
        layer = self.idmapped(lower, owner, user) if owner != user else lower
        target = self._stage("overlay")
        overlay(layer, upper, work, target)
        self.made.append(target)
        self.overlays.append(Overlay(target, lower, upper, inside or lower))
        return target

    def close(self) -> None:
        for target in reversed(self.made):
            detach(target)
            try:
                os.rmdir(target)
            except OSError:
                pass
        self.made.clear()
        self.overlays.clear()
        for d in (self.root, self.root.parent):  # the owner's directory too, once empty
            try:
                os.rmdir(d)
            except OSError:
                pass


def prune_mounts() -> list[str]:
    """Detach and remove staging mounts whose guard is gone. Returns what was removed."""
    removed: list[str] = []
    if not RUNTIME_DIR.is_dir():
        return removed
    for owner in RUNTIME_DIR.iterdir():
        if owner_alive(owner.name.replace("_", ":")):
            continue
        for sandbox in sorted(owner.iterdir()) if owner.is_dir() else ():
            for stage in sorted(sandbox.iterdir(), reverse=True) if sandbox.is_dir() else ():
                detach(str(stage))
                try:
                    stage.rmdir()
                except OSError:
                    continue
                removed.append(str(stage))
            try:
                sandbox.rmdir()
            except OSError:
                pass
        try:
            owner.rmdir()
        except OSError:
            pass
    return removed
