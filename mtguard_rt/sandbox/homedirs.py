"""The persistence directories of the sandbox home as mounts of their own (issue 17).

Each directory the guard kills writers under (`audit/persist_dirs.py`) becomes a tmpfs of
its own, owned by the sandbox user, so the kernel refuses what a kill at syscall enter
cannot undo. A *read-only* one (a directory whose every file runs later: systemd units,
autostart) refuses a create, O_TRUNC open, rename or link onto a name in it, mkdir, by any
spelling (relative, dirfd, `/proc/self/root/...`, a symlink): `EROFS`, decided by the mount,
not the name. A *writable* one (a one-level directory such as `~/.local/bin`: a subdirectory
of it is not persistence) still refuses a rename or hard link from elsewhere in the home
(`EXDEV`: another mount), so a shim staged beside cannot be moved into place, and it is
`noexec`: a shim written there by any name never runs (execve fails `EACCES`). A call with
consent for a read-only directory gets it writable for its window; one with consent for a
writable one gets it exec for good (the shim the user asked for must run in later calls)
(`HomeMounts.writable`: `mount_setattr` from a short-lived thread that entered the
sandbox's mount namespace; the directory is opened without following symlinks and checked
by device first, ~1 ms).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager

import anyio

TMPFS_SIZE = "64m"  # a cap, not a reservation: only what is written there uses memory
FLIP_TIMEOUT_S = 5.0  # one mount_setattr in a fresh thread: milliseconds, bounded anyway
SYS_OPENAT2, SYS_MOUNT_SETATTR = 437, 442  # asm-generic numbers: every architecture
RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x04, 0x08
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOEXEC, AT_EMPTY_PATH = 0x1, 0x8, 0x1000
CLONE_FS, CLONE_NEWNS = 0x200, 0x20000

_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]  # fmt: skip


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def home_tmpfs(dirs: Mapping[str, bool], uid: int, gid: int) -> dict[str, str]:
    """Docker `Tmpfs` entries: directory -> options (read-only when its value is True, else
    writable and noexec)."""
    return {
        d.rstrip("/"): f"{'ro,exec' if ro else 'rw,noexec'},nosuid,nodev,size={TMPFS_SIZE},"
        f"mode=0755,uid={uid},gid={gid}"
        for d, ro in dirs.items()
    }


def home_parents(dirs: Iterable[str], home: str) -> list[str]:
    """The directories between `home` and each of `dirs`, and the dirs themselves, parents
    first: made in the home as the sandbox user's, else Docker makes them root's."""
    base = home.rstrip("/")
    out: dict[str, None] = {}
    for d in dirs:
        rel = os.path.relpath(d.rstrip("/"), base)
        if rel.startswith(".."):
            continue
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            out[f"{base}/{'/'.join(parts[:i])}"] = None
    return sorted(out, key=lambda p: (p.count("/"), p))


def _open_beneath(root_fd: int, path: str) -> int:
    how = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0,
                   RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)  # fmt: skip
    fd = int(_libc.syscall(SYS_OPENAT2, root_fd, path.lstrip("/").encode(),
                           ctypes.byref(how), ctypes.sizeof(how)))  # fmt: skip
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


class HomeMounts:
    """The persistence mounts of one running sandbox (its init's host `pid`): directory ->
    read-only (True) or noexec (False), as `home_tmpfs` made them."""

    def __init__(self, pid: int, dirs: Mapping[str, bool]) -> None:
        self.pid = pid
        self.readonly = {d.rstrip("/") for d, ro in dirs.items() if ro}
        self.noexec = {d.rstrip("/") for d, ro in dirs.items() if not ro}
        self.devices: dict[str, int] = {}  # directory (no '/') -> its tmpfs's st_dev
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_CLOEXEC)
        try:
            for d in dirs:
                fd = _open_beneath(root, d.rstrip("/"))
                try:
                    self.devices[d.rstrip("/")] = os.fstat(fd).st_dev
                finally:
                    os.close(fd)
        finally:
            os.close(root)

    def set_attr(self, dirs: Iterable[str], attr_set: int, attr_clr: int) -> list[str]:
        """Set and clear MOUNT_ATTR_* bits of these (known) directories' mounts; returns
        those changed. Blocking."""
        wanted = [d.rstrip("/") for d in dirs if d.rstrip("/") in self.devices]
        if not wanted:
            return []
        done: list[str] = []
        errors: list[BaseException] = []
        attr = _MountAttr(attr_set, attr_clr, 0, 0)
        thread = threading.Thread(target=self._flip, args=(wanted, attr, done, errors), daemon=True)
        thread.start()
        thread.join(FLIP_TIMEOUT_S)
        if errors:
            raise errors[0]
        return done

    def _flip(
        self, dirs: list[str], attr: _MountAttr, done: list[str], errors: list[BaseException]
    ) -> None:
        """In its own thread (it leaves the host's mount namespace and never comes back)."""
        fds: list[tuple[str, int]] = []
        try:
            root = os.open(f"/proc/{self.pid}/root", os.O_PATH | os.O_CLOEXEC)
            ns = os.open(f"/proc/{self.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            try:
                for d in dirs:
                    fd = _open_beneath(root, d)
                    fds.append((d, fd))
                    if os.fstat(fd).st_dev != self.devices[d]:  # not our mount any more
                        raise OSError(f"{d} is no longer the sandbox's persistence mount")
                if _libc.unshare(CLONE_FS) != 0 or _libc.setns(ns, CLONE_NEWNS) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), "setns")
            finally:
                os.close(root)
                os.close(ns)
            for d, fd in fds:
                if _libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH,
                                 ctypes.byref(attr), ctypes.sizeof(attr)) != 0:  # fmt: skip
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), d)
                done.append(d)
        except BaseException as exc:  # the caller raises it
            errors.append(exc)
        finally:
            for _, fd in fds:
                os.close(fd)

    @asynccontextmanager
    async def writable(self, dirs: Iterable[str]) -> AsyncIterator[list[str]]:
        """These read-only directories writable while the block runs (a consented call's
        window), read-only again after, even when cancelled; these noexec ones exec from
        now on (what the user asked to put on PATH runs later)."""
        wanted = [d.rstrip("/") for d in dirs]
        ro = [d for d in wanted if d in self.readonly]
        ex = [d for d in wanted if d in self.noexec]
        if ex:
            made = await anyio.to_thread.run_sync(self.set_attr, ex, 0, MOUNT_ATTR_NOEXEC)
            self.noexec.difference_update(made)
        opened = await anyio.to_thread.run_sync(self.set_attr, ro, 0, MOUNT_ATTR_RDONLY)
        try:
            yield opened
        finally:
            if opened:
                with anyio.CancelScope(shield=True), anyio.move_on_after(FLIP_TIMEOUT_S):
                    try:
                        await anyio.to_thread.run_sync(self.set_attr, opened, MOUNT_ATTR_RDONLY, 0)
                    except OSError:
                        if os.path.exists(f"/proc/{self.pid}"):  # noqa: ASYNC240 - procfs
                            raise  # alive and not protected again: say so
