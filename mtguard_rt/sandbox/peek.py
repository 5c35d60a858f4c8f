"""Read small files inside a running sandbox from the host: what a call really wrote.

`SandboxFiles(pid).read(paths)` returns, per absolute path inside the sandbox, its text
(`str`), `ABSENT` when no such file is there, or leaves the path out when it cannot be read
safely (a symlink anywhere on the way, not a regular file, bigger than `PEEK_MAX_BYTES`). The
sandbox's files are written by a possibly hostile server while this runs as root on the
host, so the walk starts at the sandbox's root (`/proc/<pid>/root`) and opens every
component with O_NOFOLLOW from the directory fd before it: no link is followed, so nothing
outside the sandbox is ever read. Blocking (a few small reads): run it in a worker thread.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

PEEK_MAX_BYTES = 256 << 10  # persistence files are lines of text; bigger is not judged
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a fifo never blocks
_GONE = (errno.ENOENT, errno.ENOTDIR)
ABSENT = None  # the file is not there (never created, or deleted)


class _Unreadable(Exception):
    pass


class SandboxFiles:
    """The files of one sandbox, seen through its root from the host (see the module)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def read(self, paths: Iterable[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        if self.pid <= 0:
            return out
        try:
            root = os.open(f"/proc/{self.pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return out  # the sandbox is gone: nothing can be told
        try:
            for path in dict.fromkeys(paths):
                try:
                    out[path] = _read_at(root, path)
                except _Unreadable:
                    continue
        finally:
            os.close(root)
        return out

    def subdirs(self, path: str, limit: int = 64) -> list[str]:
        """The real directories (no links) directly in the sandbox's `path`, at most
        `limit` of them, sorted; [] when it cannot be walked safely."""
        norm = os.path.normpath(path)
        if self.pid <= 0 or not norm.startswith("/"):
            return []
        fds: list[int] = []
        try:
            at = os.open(f"/proc/{self.pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fds.append(at)
            for part in [p for p in norm.split("/") if p]:
                at = os.open(part, DIR_FLAGS, dir_fd=at)
                fds.append(at)
            names = sorted(os.listdir(at))
            out: list[str] = []
            for name in names:
                if len(out) >= limit:
                    break
                if stat.S_ISDIR(os.stat(name, dir_fd=at, follow_symlinks=False).st_mode):
                    out.append(f"{norm.rstrip('/')}/{name}")
            return out
        except OSError:
            return []
        finally:
            for fd in reversed(fds):
                os.close(fd)


def _read_at(root: int, path: str) -> str | None:
    norm = os.path.normpath(path)
    if not norm.startswith("/") or norm == "/":
        raise _Unreadable(path)
    parts = norm.lstrip("/").split("/")
    fds: list[int] = []
    try:
        at = root
        for part in parts[:-1]:
            try:
                at = os.open(part, DIR_FLAGS, dir_fd=at)
            except OSError as exc:
                _absent_or_raise(part, at, path, exc)
                return ABSENT
            fds.append(at)
        try:
            fd = os.open(parts[-1], READ_FLAGS, dir_fd=at)
        except OSError as exc:
            _absent_or_raise(parts[-1], at, path, exc)
            return ABSENT
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > PEEK_MAX_BYTES:
            raise _Unreadable(path)
        data = os.read(fd, PEEK_MAX_BYTES + 1)
        if len(data) > PEEK_MAX_BYTES:
            raise _Unreadable(path)
        return data.decode("utf-8", errors="replace")
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _absent_or_raise(name: str, at: int, path: str, exc: OSError) -> None:
    """Return when `name` is not there at all; raise `_Unreadable` when something is (a
    link, which O_NOFOLLOW refuses with ELOOP or, for a directory, ENOTDIR; no access)."""
    if exc.errno not in _GONE:
        raise _Unreadable(path) from exc
    try:
        os.stat(name, dir_fd=at, follow_symlinks=False)
    except OSError:
        return
    raise _Unreadable(path) from exc
