"""A shadow copy of a workspace and the index of what it held, for rolling calls back.

`WorkspaceShadow.create()` indexes every entry of the workspace (relative path -> type, mode,
owner, size, times, inode, symlink target) and copies each regular file's bytes into one
private pack file (copy_file_range: in the kernel, extents shared where the filesystem
clones). `changes()` compares the workspace with the index (a full stat scan, or given paths
plus every directory); `commit()` takes changed entries as the new baseline; `restore()` puts
them back as they were: content, mode, owner, times; created entries removed, deleted ones
recreated. The workspace is written by a sandboxed, possibly hostile server while this code
runs as root, so every workspace access goes through directory fds with O_NOFOLLOW: no
symlink in it is ever followed. Blocking: run it in a worker thread. Bounded by
`ShadowLimits` and a deadline per operation (`RollbackError` past either).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from ..errors import RollbackError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a fifo never blocks
COPY_CHUNK = 1 << 30  # bytes per copy_file_range call
# Blobs start on block boundaries in the pack, so a filesystem that clones extents
# (btrfs, XFS) can share them through copy_file_range; the gaps are holes, not disk.
ALIGN = 4096
COMPACT_MIN = 64 << 20  # the pack is compacted when over this and twice its live bytes
MISSING = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)  # "not there" (a parent may be a link)


class ShadowLimits(msgspec.Struct, kw_only=True, frozen=True):
    max_files: int = 200_000  # index entries; the index costs ~300 bytes of memory each
    max_bytes: int = 2 << 30  # bytes of regular files held in the shadow store


class Entry(NamedTuple):
    """One indexed workspace entry. `sig` is what a change is detected by: a write, chmod,
    chown, utime, truncate or replacement moves ctime or the inode, which no unprivileged
    process can set back."""

    sig: tuple[int, int, int, int, int, int, int]  # mode, uid, gid, size, mtime, ctime, ino
    atime_ns: int
    link: str | None = None  # a symlink's target
    blob: tuple[int, int] | None = None  # a regular file's bytes: (offset, length) in the pack
    lower: bool = False  # an overlay's file still as its read-only lower layer holds it

    @property
    def mode(self) -> int:
        return self.sig[0]

    @property
    def kind(self) -> str:
        return _kind(self.sig[0])


def _sig(st: os.stat_result) -> tuple[int, int, int, int, int, int, int]:
    return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
            st.st_ino)  # fmt: skip


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "fifo" if stat.S_ISFIFO(mode) else "special"


def _depth(rel: str) -> int:
    return rel.count("/") + 1 if rel else 0


def parent_of(rel: str) -> str:
    return rel.rpartition("/")[0]


class _Clock:
    def __init__(self, what: str, timeout_s: float, root: str) -> None:
        self.what, self.timeout_s, self.root = what, timeout_s, root
        self.deadline = time.monotonic() + timeout_s

    def check(self, done: int, total: int | None = None) -> None:
        if time.monotonic() > self.deadline:
            of = f" of {total}" if total is not None else ""
            raise RollbackError(
                self.root,
                f"{self.what} timed out after {self.timeout_s:g} s ({done}{of} entries done)",
            )


class WorkspaceShadow:
    """The baseline of one workspace. Create with `WorkspaceShadow.create()`; `close()`."""

    def __init__(
        self, root: str, store: str, limits: ShadowLimits, layers: tuple[str, str] | None = None
    ) -> None:
        self.root = root
        self.store = store
        self.limits = limits
        self.index: dict[str, Entry] = {}
        self.children: dict[str, set[str]] = {}  # directory -> its indexed entries
        self.dirs: set[str] = set()  # indexed directories
        self.bytes = 0  # live bytes in the pack
        self.method = "copy_file_range"  # or "read/write" where the kernel refuses it
        self._root_fd = os.open(os.path.realpath(root), DIR_FLAGS)  # the configured path: trusted
        # one pack file, not a file per blob: creating 10,000 files is most of a snapshot
        self._pack_path = os.path.join(store, "pack")
        self._pack = os.open(self._pack_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._end = 0
        # `root` is an overlay mount: (lower, upper) directories. A file not copied up is
        # indexed without copying its bytes (the lower layer never changes: the server
        # writes to the upper one); a restore reads them back from the lower layer.
        self._layer_fds = tuple(os.open(d, DIR_FLAGS) for d in layers) if layers else ()

    @classmethod
    def create(
        cls,
        root: str,
        store: str,
        limits: ShadowLimits,
        timeout_s: float,
        layers: tuple[str, str] | None = None,
    ) -> WorkspaceShadow:
        shadow = cls(root, store, limits, layers)
        try:
            current = shadow.walk(timeout_s)
            shadow.commit(sorted(current, key=_depth), timeout_s, current)
        except BaseException:
            shadow.close()
            raise
        return shadow

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            os.close(self._pack)
            for fd in self._layer_fds:
                os.close(fd)
            self._root_fd = -1

    def _open_in(self, layer: int, rel: str, flags: int) -> int | None:
        """`rel` opened in an overlay layer (0 lower, 1 upper) without following links;
        None when it is not there."""
        fd = os.dup(self._layer_fds[layer])
        try:
            for part in parent_of(rel).split("/") if parent_of(rel) else ():
                sub = os.open(part, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = sub
            return os.open(rel.rpartition("/")[2], flags, dir_fd=fd)
        except OSError as exc:
            if exc.errno in MISSING:
                return None
            raise
        finally:
            os.close(fd)

    def _in_lower_only(self, rel: str) -> bool:
        if not self._layer_fds:
            return False
        upper = self._open_in(1, rel, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        if upper is not None:
            os.close(upper)
            return False
        return True

    # -- safe access ------------------------------------------------------------------------
    def _open_dir(self, rel: str) -> int:
        """An fd on directory `rel`, walked component by component without following links."""
        fd = os.dup(self._root_fd)
        for part in rel.split("/") if rel else ():
            try:
                sub = os.open(part, DIR_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            fd = sub
        return fd

    def lstat(self, rel: str) -> os.stat_result | None:
        if not rel:
            return os.fstat(self._root_fd)
        try:
            fd = self._open_dir(parent_of(rel))
        except OSError as exc:
            if exc.errno in MISSING:
                return None
            raise
        try:
            return os.stat(rel.rpartition("/")[2], dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in MISSING:
                return None
            raise
        finally:
            os.close(fd)

    def walk(self, timeout_s: float, under: str = "") -> dict[str, os.stat_result]:
        """lstat of every entry at or below `under` (bounded by max_files and the clock)."""
        clock = _Clock("the workspace scan", timeout_s, self.root)
        top = self.lstat(under)
        if top is None:
            return {}
        out = {under: top}
        if not stat.S_ISDIR(top.st_mode):
            return out
        try:
            stack = [(under, self._open_dir(under))]
        except OSError as exc:
            if exc.errno in MISSING:
                return out
            raise
        try:
            while stack:
                rel, fd = stack.pop()
                try:
                    clock.check(len(out))
                    with os.scandir(fd) as entries:
                        for e in entries:
                            try:
                                st = e.stat(follow_symlinks=False)
                            except OSError as exc:
                                if exc.errno in MISSING:
                                    continue  # gone since the listing
                                raise
                            sub = f"{rel}/{e.name}" if rel else e.name
                            out[sub] = st
                            if len(out) > self.limits.max_files:
                                raise RollbackError(
                                    self.root,
                                    f"more than {self.limits.max_files} entries "
                                    "(raise [sandbox] rollback_max_files)",
                                )
                            if stat.S_ISDIR(st.st_mode):
                                try:
                                    stack.append((sub, os.open(e.name, DIR_FLAGS, dir_fd=fd)))
                                except OSError as exc:
                                    if exc.errno not in MISSING:
                                        raise
                finally:
                    os.close(fd)
        finally:
            for _, fd in stack:
                os.close(fd)
        return out

    # -- what changed ----------------------------------------------------------------------
    def changes(
        self, timeout_s: float, paths: Iterable[str] | None = None
    ) -> tuple[list[str], int]:
        """(changed paths, entries stat'ed). `paths=None`: a full scan. Otherwise the given
        paths, their parents and every directory; the entries of a directory that changed,
        the subtrees of directories that are new or gone."""
        if paths is None:
            current = self.walk(timeout_s)
            changed = [r for r, st in current.items() if self._differs(r, st)]
            changed += [r for r in self.index if r not in current]
            return sorted(changed, key=_depth), len(current)
        clock = _Clock("checking the call's paths", timeout_s, self.root)
        # Every directory too: an entry created, deleted or renamed by any means (mknod,
        # symlink, link: calls the monitor does not trace) moves its directory's mtime.
        queue = deque(sorted({*paths, *(parent_of(r) for r in paths), *self.dirs}, key=_depth))
        seen: dict[str, os.stat_result | None] = {}
        while queue:
            rel = queue.popleft()
            if rel in seen:
                continue
            clock.check(len(seen))
            if len(seen) >= self.limits.max_files + len(self.index):
                raise RollbackError(
                    self.root,
                    f"more than {self.limits.max_files} entries changed "
                    "(raise [sandbox] rollback_max_files)",
                )
            st = seen[rel] = self.lstat(rel)
            old = self.index.get(rel)
            is_dir = st is not None and stat.S_ISDIR(st.st_mode)
            if is_dir and (old is None or old.sig != _sig(st)):  # type: ignore[arg-type]
                names = self._names(rel)
                queue.extend(f"{rel}/{n}" if rel else n for n in names)
                queue.extend(k for k in self.children.get(rel, ()) if k.rpartition("/")[2]
                             not in names)  # fmt: skip
            elif old is not None and old.kind == "dir" and not is_dir:
                queue.extend(self.children.get(rel, ()))  # gone or replaced: so are they
        changed = [r for r, st in seen.items() if self._differs(r, st)]
        return sorted(changed, key=_depth), len(seen)

    def _names(self, rel: str) -> set[str]:
        try:
            fd = self._open_dir(rel)
        except OSError as exc:
            if exc.errno in MISSING:
                return set()
            raise
        try:
            return set(os.listdir(fd))
        finally:
            os.close(fd)

    def _put(self, rel: str, entry: Entry) -> None:
        if rel and rel not in self.index:
            self.children.setdefault(parent_of(rel), set()).add(rel)
        self.index[rel] = entry
        if entry.kind == "dir":
            self.dirs.add(rel)
        else:
            self.dirs.discard(rel)

    def _differs(self, rel: str, st: os.stat_result | None) -> bool:
        old = self.index.get(rel)
        if old is None or st is None:
            return old is not None or st is not None
        return old.sig != _sig(st)

    def classify(self, rel: str) -> str:
        """created / deleted / modified / touched (a directory whose only change is the
        times its entries moved) for a path `changes()` returned, before settling it."""
        old, st = self.index.get(rel), self.lstat(rel)
        if old is None:
            return "created"
        if st is None:
            return "deleted"
        if old.kind == "dir" and stat.S_ISDIR(st.st_mode) and old.sig[:3] == _sig(st)[:3]:
            return "touched"
        return "modified"

    # -- commit: the workspace's state becomes the baseline --------------------------------
    def commit(
        self,
        changed: list[str],
        timeout_s: float,
        current: dict[str, os.stat_result] | None = None,
    ) -> None:
        clock = _Clock("the shadow commit", timeout_s, self.root)
        for n, rel in enumerate(sorted(changed, key=_depth)):
            clock.check(n, len(changed))
            st = current.get(rel) if current is not None else self.lstat(rel)
            if st is None:
                self._forget(rel)
            else:
                self._take(rel, st)
        self.compact()

    def _forget(self, rel: str) -> None:
        old = self.index.pop(rel, None)
        if old is not None and rel:
            self.children.get(parent_of(rel), set()).discard(rel)
        self.dirs.discard(rel)
        if old is not None and old.blob is not None:
            self.bytes -= old.blob[1]

    def _take(self, rel: str, st: os.stat_result) -> None:
        old = self.index.get(rel)
        if not stat.S_ISREG(st.st_mode):
            link = None
            if stat.S_ISLNK(st.st_mode):
                fd = self._open_dir(parent_of(rel))
                try:
                    link = os.readlink(rel.rpartition("/")[2], dir_fd=fd)
                finally:
                    os.close(fd)
            if old is not None and old.blob is not None:
                self._forget(rel)
            self._put(rel, Entry(_sig(st), st.st_atime_ns, link=link))
            return
        if self._in_lower_only(rel):  # its bytes stay in the lower layer: nothing to copy
            if old is not None and old.blob is not None:
                self._forget(rel)
            self._put(rel, Entry(_sig(st), st.st_atime_ns, lower=True))
            return
        fd = self._open_dir(parent_of(rel))
        try:
            src = os.open(rel.rpartition("/")[2], READ_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):  # swapped since the scan: take it as it is now
                self._put(rel, Entry(_sig(st), st.st_atime_ns))
                return
            before = old.blob[1] if old is not None and old.blob else 0
            if self.bytes - before + st.st_size > self.limits.max_bytes:
                raise RollbackError(
                    self.root,
                    f"the shadow would exceed {self.limits.max_bytes >> 20} MiB at {rel!r} "
                    "(raise [sandbox] rollback_max_mb)",
                )
            offset = self._end
            length = self._copy(src, 0, self._pack, offset, st.st_size)
            self._end = -(-(offset + length) // ALIGN) * ALIGN
            self.bytes += length - before
            self._put(rel, Entry(_sig(st), st.st_atime_ns, blob=(offset, length)))
        finally:
            os.close(src)

    def _copy(self, src: int, src_off: int, dst: int, dst_off: int, size: int) -> int:
        """Copy `size` bytes (fewer if the source ends first) in the kernel; returns how
        many. Old bytes are overwritten in place, never truncated to 0 or renamed over:
        ext4 flushes such a file at once (auto_da_alloc), 1.4 ms per file measured here."""
        done = 0
        if self.method == "copy_file_range":
            try:
                while done < size:
                    n = os.copy_file_range(src, dst, min(size - done, COPY_CHUNK),
                                           src_off + done, dst_off + done)  # fmt: skip
                    if n == 0:
                        break
                    done += n
                return done
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                self.method = "read/write"
        while done < size:
            chunk = os.pread(src, min(size - done, 1 << 20), src_off + done)
            if not chunk:
                break
            os.pwrite(dst, chunk, dst_off + done)
            done += len(chunk)
        return done

    def compact(self) -> None:
        """Rewrite the pack with live blobs only, once replaced ones dominate it."""
        if self._end <= max(COMPACT_MIN, 2 * self.bytes):
            return
        path = self._pack_path + ".new"
        new = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        end = 0
        try:
            for rel, entry in self.index.items():
                if entry.blob is not None:
                    length = self._copy(self._pack, entry.blob[0], new, end, entry.blob[1])
                    self.index[rel] = entry._replace(blob=(end, length))
                    end = -(-(end + length) // ALIGN) * ALIGN
        except BaseException:
            os.close(new)
            raise
        os.replace(path, self._pack_path)
        os.close(self._pack)
        self._pack, self._end = new, end

    # -- restore: the baseline goes back into the workspace --------------------------------
    def restore(self, changed: list[str], timeout_s: float) -> dict[str, str]:
        """Put `changed` back as indexed. Returns {path: why} for each entry that could not
        be restored (the rest is); stops at the deadline, listing what is left."""
        clock = _Clock("the restore", timeout_s, self.root)
        failed: dict[str, str] = {}
        todo = sorted(set(changed), key=_depth)
        steps = [
            (list(reversed(todo)), self._remove_wrong),  # deepest first: clear the way
            (todo, self._put_back),  # shallowest first: parents before children
            ([r for r in reversed(todo) if self._is_dir(r)], self._dir_meta),  # after children
        ]
        for paths, step in steps:
            for n, rel in enumerate(paths):
                if rel in failed:
                    continue
                try:
                    clock.check(n, len(paths))
                except RollbackError as exc:
                    for left in paths[n:]:
                        failed.setdefault(left, exc.why)
                    break
                try:
                    step(rel)
                except OSError as exc:
                    failed[rel] = exc.strerror or str(exc)
        for rel in todo:  # ctime and inodes moved: the index follows what is there now
            if rel in failed:
                continue
            st, old = self.lstat(rel), self.index.get(rel)
            if old is not None and st is not None:
                self.index[rel] = old._replace(sig=_sig(st))
        return failed

    def _is_dir(self, rel: str) -> bool:
        old = self.index.get(rel)
        return old is not None and old.kind == "dir"

    def _remove_wrong(self, rel: str) -> None:
        if not rel:
            return
        old = self.index.get(rel)
        try:
            fd = self._open_dir(parent_of(rel))
        except OSError as exc:
            if exc.errno in MISSING:
                return  # a parent is gone or is a link: it is removed or recreated itself
            raise
        name = rel.rpartition("/")[2]
        try:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                if exc.errno in MISSING:
                    return
                raise
            same = old is not None and old.kind == _kind(st.st_mode)
            if same and old is not None and old.kind in ("file", "dir"):
                return  # rewritten in place, keeping the inode open fds refer to
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=fd)  # fd-based, never follows a link
            else:
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)

    def _put_back(self, rel: str) -> None:
        old = self.index.get(rel)
        if old is None or not rel:
            return
        fd = self._open_dir(parent_of(rel))
        name = rel.rpartition("/")[2]
        try:
            kind = old.kind
            if kind == "dir":
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                return  # owner, mode and times once its entries are back (_dir_meta)
            if kind == "symlink":
                assert old.link is not None
                os.symlink(old.link, name, dir_fd=fd)
                os.chown(name, old.sig[1], old.sig[2], dir_fd=fd, follow_symlinks=False)
                os.utime(name, ns=(old.atime_ns, old.sig[4]), dir_fd=fd, follow_symlinks=False)
                return
            if kind == "fifo":
                os.mkfifo(name, 0o600, dir_fd=fd)
            elif kind == "special":
                raise OSError(errno.EOPNOTSUPP, "sockets and devices are not recreated")
            else:
                self._rewrite(fd, name, old, rel)
                return
            self._meta(fd, name, old)
        finally:
            os.close(fd)

    def _rewrite(self, fd: int, name: str, old: Entry, rel: str) -> None:
        assert old.blob is not None or old.lower
        try:
            dst = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                          dir_fd=fd)  # fmt: skip
        except FileNotFoundError:
            dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=fd)  # fmt: skip
        try:
            if not stat.S_ISREG(os.fstat(dst).st_mode):
                raise OSError(errno.EEXIST, "replaced by a non-file during the restore")
            if old.blob is not None:
                offset, length = old.blob
                if self._copy(self._pack, offset, dst, 0, length) != length:
                    raise OSError(errno.EIO, "the shadow copy is shorter than the file was")
            else:
                length = self._from_lower(old, dst, rel)
            os.ftruncate(dst, length)  # over the old bytes, then cut (see _copy)
            os.fchown(dst, old.sig[1], old.sig[2])
            os.fchmod(dst, stat.S_IMODE(old.mode))
            os.utime(dst, ns=(old.atime_ns, old.sig[4]))
        finally:
            os.close(dst)

    def _from_lower(self, old: Entry, dst: int, rel: str) -> int:
        """Copy the lower layer's bytes of `rel` into `dst`."""
        src = self._open_in(0, rel, READ_FLAGS)
        if src is None:
            raise OSError(errno.ENOENT, "gone from the overlay's lower layer")
        try:
            length = old.sig[3]
            if self._copy(src, 0, dst, 0, length) != length:
                raise OSError(errno.EIO, "the lower layer's file is shorter than it was")
            return length
        finally:
            os.close(src)

    def _meta(self, fd: int, name: str, old: Entry) -> None:
        os.chown(name, old.sig[1], old.sig[2], dir_fd=fd, follow_symlinks=False)
        os.chmod(name, stat.S_IMODE(old.mode), dir_fd=fd)  # never a link here
        os.utime(name, ns=(old.atime_ns, old.sig[4]), dir_fd=fd, follow_symlinks=False)

    def _dir_meta(self, rel: str) -> None:
        old = self.index[rel]
        fd = self._open_dir(rel)
        try:
            os.fchown(fd, old.sig[1], old.sig[2])
            os.fchmod(fd, stat.S_IMODE(old.mode))
            os.utime(fd, ns=(old.atime_ns, old.sig[4]))
        finally:
            os.close(fd)
