"""What an exec really ran, judged by the file, not by its name (`identify()`).

A program is named by the exec's path, but what runs is a file: a renamed copy of `sh` is
`sh`, a loader (`ld.so prog`) runs `prog`, `/proc/self/exe` re-runs the caller's own program.
`identify()` gives the `Program` the exec rules judge: its `kind` is `named` (the file is what
its name says), `copy` (the same file or the same content as a known shell, interpreter or
loader: `exe` is that program), `no-file` (a memfd, a deleted file, an fd path: no file on
disk, which honest servers never run) or `made` (a file written in the sandbox during the
session: an unknown program). Files are read in the sandbox's own root (`/proc/<pid>/root`,
symlinks resolved inside it); content is compared only when sizes match, and digests are
cached by (dev, inode, size, mtime), so an exec costs a few stats. `programs.py` applies it
to a call's execs (online, then after the call).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from .policy import Policy, basename

Kind = Literal["named", "copy", "no-file", "made"]
BIN_DIRS = ("/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin")
LOADER_DIRS = ("/lib64", "/lib", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/x86_64-linux-gnu",
               "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")  # fmt: skip
MULTI_CALL = frozenset({"busybox", "toybox"})  # the applet is argv[0]'s name
MAX_HOPS = 40  # symlinks followed per path, as the kernel's limit
MAX_CACHE = 4096  # digests and resolved roots kept, then forgotten at once
CHUNK = 1 << 20
HEAD_BYTES = 64 << 10  # compared before the whole content
FD_PATH = re.compile(r"^(?:fd:\d+|/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/\d+"
                     r"|/dev/fd/\d+|/memfd:.*)$")  # fmt: skip
SELF_EXE = re.compile(r"^/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/exe$")
LOADER = re.compile(r"^ld(?:-linux[\w.-]*?)?(?:-[\d.]+)?\.so(?:\.\d+)*$|^ld-musl-\w+\.so\.\d+$")
# ld.so options that take a value, and those that do not run the program at all
LOADER_VALUED = frozenset({"--library-path", "--inhibit-rpath", "--audit", "--preload", "--argv0",
                           "--glibc-hwcaps-prefix", "--glibc-hwcaps-mask"})  # fmt: skip
LOADER_NO_RUN = frozenset({"--list", "--verify", "--help", "--version", "--list-tunables",
                           "--list-diagnostics"})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Program:
    """What one exec ran: `exe` and `argv` as the rules judge them (see the module doc)."""

    kind: Kind
    exe: str
    argv: list[str]
    note: str = ""  # evidence: what it really was, for a kind other than `named`

    @property
    def unknown(self) -> bool:
        return self.kind in ("no-file", "made")


def no_file_name(path: str) -> bool:
    """A name that is no file on disk: an fd path, a memfd, a deleted file."""
    return bool(FD_PATH.match(path)) or path.endswith(" (deleted)")


def is_loader(path: str) -> bool:
    return bool(LOADER.match(basename(path)))


def loader_target(argv: list[str]) -> int | None:
    """The index in a loader's argv of the program it runs; None when it runs none."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in LOADER_NO_RUN:
            return None
        if a == "--":
            return i + 1 if i + 1 < len(argv) else None
        if a in LOADER_VALUED:
            i += 2
            continue
        if a.startswith("--"):
            i += 1  # an option this loader knows and we do not: it takes no value
            continue
        return i
    return None


def resolve_in(root: str, path: str) -> str | None:
    """`path` as the sandbox sees it, every symlink resolved inside `root` (an absolute link
    target is the sandbox's, not the host's); None when it does not exist or loops."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = "/" + "/".join([*done, part])
        if here == "/proc":
            return None  # the host answers /proc/self: the caller's names are not resolvable
        try:
            st = os.lstat(root + here)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_HOPS:
                return None
            try:
                target = os.readlink(root + here)
            except OSError:
                return None
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        done.append(part)
    return "/" + "/".join(done)


FileKey = tuple[int, int, int, int]  # dev, inode, size, mtime_ns


def _key(st: os.stat_result) -> FileKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class _Known:
    """The known programs of one sandbox root: by (dev, inode), and by size."""

    by_inode: dict[tuple[int, int], str] = field(default_factory=dict)
    by_size: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # size -> (path, host)


class ProgramFiles:
    """The sandbox's files as the exec rules read them; caches shared by every call."""

    def __init__(self) -> None:
        self._digests: dict[tuple[int, int, int, int, bool], str] = {}
        self._known: dict[tuple[tuple[int, int], int], _Known] = {}

    def digest(self, host_path: str, st: os.stat_result, head: bool = False) -> str | None:
        """The file's content digest (`head`: of its first `HEAD_BYTES` only), cached."""
        key = (*_key(st), head)
        got = self._digests.get(key)
        if got is None:
            h = hashlib.blake2b(digest_size=20)
            left = HEAD_BYTES if head else st.st_size
            try:
                with open(host_path, "rb") as fh:
                    while left > 0 and (chunk := fh.read(min(CHUNK, left))):
                        h.update(chunk)
                        left -= len(chunk)
            except OSError:
                return None
            if len(self._digests) >= MAX_CACHE:
                self._digests.clear()
            got = self._digests[key] = h.hexdigest()
        return got

    def known(self, root: str, policy: Policy) -> _Known:
        """Every shell, interpreter and loader in the root's usual places (once per root)."""
        try:
            rst = os.stat(root)
        except OSError:
            return _Known()
        key = ((rst.st_dev, rst.st_ino), id(policy))
        got = self._known.get(key)
        if got is not None:
            return got
        known = _Known()
        for dirs, wanted in ((BIN_DIRS, policy.is_shell), (LOADER_DIRS, is_loader)):
            for d in dirs:
                real = resolve_in(root, d)
                if real is None:
                    continue
                try:
                    names = sorted(os.listdir(root + real))
                except OSError:
                    continue
                for name in names:
                    if not wanted(name):
                        continue
                    path = resolve_in(root, f"{real}/{name}")
                    if path is None:
                        continue
                    try:
                        st = os.stat(root + path)
                    except OSError:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    known.by_inode.setdefault((st.st_dev, st.st_ino), path)
                    sized = known.by_size.setdefault(st.st_size, [])
                    if all(p != path for p, _ in sized):
                        sized.append((path, root + path))
        if len(self._known) >= MAX_CACHE:
            self._known.clear()
        self._known[key] = known
        return known

    def copy_of(self, root: str, host_path: str, policy: Policy) -> str | None:
        """The known program (its path in the sandbox) the file at `host_path` is, by inode
        or by content; None for any other file."""
        try:
            st = os.stat(host_path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        known = self.known(root, policy)
        same = known.by_inode.get((st.st_dev, st.st_ino))
        if same is not None:
            return same
        sized = known.by_size.get(st.st_size)
        if not sized:
            return None
        for path, host in sized:
            try:
                kst = os.stat(host)
            except OSError:
                continue
            # the head first: a file of the same size but other content costs 64 KiB, not all
            head = self.digest(host_path, st, head=True)
            if head is None or self.digest(host, kst, head=True) != head:
                continue
            mine = self.digest(host_path, st)
            if mine is not None and self.digest(host, kst) == mine:
                return path
        return None


FILES = ProgramFiles()  # one per process: the caches are keyed by file identity


@dataclass
class Where:
    """Where an exec happened: the sandbox root to read files in (`/proc/<pid>/root` of a
    live process of the sandbox), the exec'ing process's host pid when it is still alive (its
    `/proc/<pid>/exe` is what the kernel runs), its cwd, the program it ran before this exec,
    and what the session wrote (`made(path)`)."""

    root: str | None = None
    live_pid: int | None = None
    cwd: str | None = None
    before: str | None = None
    made: Callable[[str], bool] = lambda _path: False


def _live_exe(pid: int, root: str | None) -> str | None:
    """readlink of /proc/<pid>/exe, in the sandbox's view."""
    try:
        got = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    if root:
        try:
            host_root = os.readlink(root)
        except OSError:
            host_root = "/"
        if host_root not in ("", "/") and got.startswith(host_root + "/"):
            got = got[len(host_root) :]
    return got


def identify(
    exe: str, argv: list[str], where: Where, policy: Policy, files: ProgramFiles = FILES,
    depth: int = 0,
) -> Program:
    """The program one successful exec of `exe` with `argv` ran (see the module doc)."""
    argv = argv or [exe]
    if no_file_name(exe):
        real = _live_exe(where.live_pid, where.root) if where.live_pid else None
        note = f"no file on disk: {exe}" + (f" is {real}" if real and real != exe else "")
        return Program("no-file", exe, argv, note)
    if SELF_EXE.match(exe):
        # the caller's own program again (chromium's zygotes): what runs now, or what it ran
        was = _live_exe(where.live_pid, where.root) if where.live_pid else where.before
        if was and was.startswith("/") and depth == 0:
            if was.startswith("/memfd:") or was.endswith(" (deleted)"):
                return Program("no-file", exe, argv, f"no file on disk: {exe} is {was}")
            again = identify(was, argv, Where(where.root, None, where.cwd, None, where.made),
                             policy, files, 1)
            note = f"re-ran its own program {was}" + (f"; {again.note}" if again.note else "")
            return Program(again.kind, again.exe, again.argv, note)
        return Program("named", exe, argv)
    path = exe if exe.startswith("/") else (posixpath.join(where.cwd, exe) if where.cwd else exe)
    path = posixpath.normpath(path)
    copy: str | None = None
    host: str | None = None
    if where.root is not None and path.startswith("/"):
        real = resolve_in(where.root, path)
        if real is not None:
            host = where.root + real
            copy = files.copy_of(where.root, host, policy)
    if where.live_pid is not None and host is None:
        gone = _live_exe(where.live_pid, where.root)
        if gone is not None and (gone.startswith("/memfd:") or gone.endswith(" (deleted)")):
            if where.made(path):
                return Program("made", exe, argv, f"written in the sandbox during the session, "
                               f"then deleted ({gone})")  # fmt: skip
            return Program("no-file", exe, argv, f"no file on disk: {exe} is {gone}")
    run_by_loader = (copy is not None and is_loader(copy)) or is_loader(path)
    if run_by_loader and depth < 2:
        at = loader_target(argv)
        if at is None:
            return Program("named", exe, argv)  # a listing (`ldd`): the loader runs nothing
        inner = identify(argv[at], argv[at:], Where(where.root, None, where.cwd, None,
                                                    where.made), policy, files, depth + 1)
        by = f"run by the dynamic loader {exe}" + (f" (a copy of {copy})" if copy and
                                                   basename(copy) != basename(exe) else "")
        note = by + (f"; {inner.note}" if inner.note else "")
        return Program(inner.kind if inner.kind != "named" else "copy", inner.exe, inner.argv,
                       note)
    if copy is not None and not run_by_loader:
        same_name = basename(copy) == basename(path) or (
            policy.is_shell(path) and basename(copy).rstrip("0123456789.") ==
            basename(path).rstrip("0123456789."))  # fmt: skip
        if basename(copy) in MULTI_CALL:
            applet = basename(argv[0])
            if applet in MULTI_CALL and len(argv) > 1:
                applet = basename(argv[1])
            if not policy.is_shell(applet) or policy.is_shell(path):
                return Program("named", exe, argv)  # `ls` through busybox is ls
            same_name = False
        if not same_name and not policy.is_shell(path):
            return Program("copy", copy, argv, f"{exe} is a copy of {copy}")
    if where.made(path):
        return Program("made", exe, argv, f"{exe} was written in the sandbox during the session")
    return Program("named", exe, argv)
