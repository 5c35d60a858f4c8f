"""Per-process path state: cwd and an fd table, to make every recorded name absolute.

Names are resolved lexically (`..` folded, symlinks not followed) against the cwd or the
fd a dirfd names. When the base is unknown (an fd opened before seeding that /proc did not
show, a truncated name) the raw name is kept and marked unresolved: never a guess. Names
that are not valid UTF-8 are kept with backslash escapes.
"""

from __future__ import annotations

import posixpath

AT_FDCWD = -100


def text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


class FsState:
    __slots__ = ("cwd", "fds")

    def __init__(self, cwd: str | None = None, fds: dict[int, str] | None = None) -> None:
        self.cwd = cwd
        self.fds: dict[int, str] = dict(fds or {})

    def fork(self) -> FsState:
        return FsState(self.cwd, self.fds)

    def resolve(self, dirfd: int, raw: bytes, truncated: bool = False) -> tuple[str, bool]:
        """(path, resolved): absolute when the base is known and the name is whole."""
        name = text(raw)
        if truncated:
            return name, False
        if name.startswith("/"):
            if "/." in name or "//" in name or name.endswith("/"):
                return posixpath.normpath(name), True
            return name, True  # already normal: skip normpath on the hot path
        base = self.cwd if dirfd == AT_FDCWD else self.fds.get(dirfd)
        if base is None:
            # an empty name is the fd itself (fexecve of a memfd, AT_EMPTY_PATH): name it
            return (name or f"fd:{dirfd}"), False
        if not name:
            return base, True  # AT_EMPTY_PATH: the dirfd itself
        return posixpath.normpath(posixpath.join(base, name)), True

    def fd_path(self, fd: int) -> tuple[str, bool]:
        path = self.fds.get(fd)
        return (path, True) if path is not None else (f"fd:{fd}", False)

    def opened(self, fd: int, path: str, resolved: bool) -> None:
        if resolved:
            self.fds[fd] = path
        else:
            self.fds.pop(fd, None)

    def closed(self, fd: int) -> None:
        self.fds.pop(fd, None)

    def duped(self, old: int, new: int) -> None:
        path = self.fds.get(old)
        if path is None:
            self.fds.pop(new, None)
        else:
            self.fds[new] = path
