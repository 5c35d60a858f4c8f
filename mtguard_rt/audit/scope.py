"""The scope of a call: where its file effects may land (for `scope-escape`, rules_scope.py).

`ServerScope` is per server: its workspace (the sandbox's read-write mount, also the server's
working directory), the roots it was started with (directories its command line or its
environment names) and its other mounts: read-only host data it was shown, not given
(`data_mounts`: not the workspace, a root, or the mount that holds its code).
`CallScope` adds the paths the call's task names; each argument is read as a path
(`arg_paths`, also percent-decoded: a server may url-decode a name) to tell where it leads.
Links in the workspace are resolved on the host side
of the mount (same path inside and out): `lstat`/`readlink` only, bounded, never followed
once they leave a root.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

from .text import _tokens

MAX_LINKS = 40  # links followed in one resolution (the kernel's own limit for a path walk)
MAX_LSTATS = 4096  # lstat calls in one call's resolutions: a deep tree costs a bound, no more
MAX_PATH_TEXT = 4096  # an argument longer than this is not read as a path
MAX_DECODES = 3  # rounds of percent-decoding an argument path gets


def under(path: str, root: str) -> bool:
    """Is the normal absolute `path` `root` itself or inside it?"""
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def climbs(path: str) -> bool:
    """Does `path` climb above the directory it starts from (`../x`, `a/../../x`, and an
    absolute `/w/a/../../x` that leaves `/w/a`'s parent)? `docs/../README.md` does not."""
    if path.startswith("/"):
        parts = path.split("/")
        if ".." not in parts:
            return False
        head = "/".join(parts[: parts.index("..")]) or "/"
        return not under(posixpath.normpath(path), posixpath.dirname(head))
    norm = posixpath.normpath(path)
    return norm == ".." or norm.startswith("../")


def _roots_of(command: Iterable[str]) -> list[str]:
    """The directories a command line names (`/data`, `--root=/data`): roots it was given."""
    found: list[str] = []
    for arg in command:
        for text in (arg, arg.split("=", 1)[-1]):
            if text.startswith("/") and ".." not in text.split("/") and os.path.isdir(text):
                found.append(posixpath.normpath(text))
                break
    return found


def _code_entries(command: list[str]) -> list[str]:
    """Where the command's program and script arguments really are (host paths)."""
    out: list[str] = []
    if command:
        program = command[0] if "/" in command[0] else shutil.which(command[0])
        out += [os.path.realpath(program)] if program else []
    out += [os.path.realpath(a) for a in command[1:] if a.startswith("/") and os.path.isfile(a)]
    return out


def _data_mounts(
    mounts: Iterable[str], command: list[str], workspace: str | None, roots: tuple[str, ...]
) -> tuple[str, ...]:
    """The mounts (paths inside: as given, normal) that hold neither the workspace's inside
    nor a root nor the server's own code: data it can see but was not given."""
    code = _code_entries(command)
    out: list[str] = []
    for m in mounts:
        inside = posixpath.normpath(os.path.abspath(m))
        real = os.path.realpath(m)
        if inside == "/" or (workspace and under(inside, workspace)):
            continue
        if any(under(inside, r) for r in roots) or any(under(c, real) for c in code):
            continue
        out.append(inside)
    return tuple(dict.fromkeys(out))


@dataclass(eq=False)
class ServerScope:
    """What a server was given: `workspace` (None: its home, not a grant) and `roots`;
    `made`: the symlinks the kernel saw this server make in a base during its session (a
    link planted in one call and read through in a later one is still its own link);
    `data_mounts`: the other read-only mounts (`scope_reads`)."""

    workspace: str | None = None
    roots: tuple[str, ...] = ()
    made: set[str] = field(default_factory=set)
    data_mounts: tuple[str, ...] = ()

    @classmethod
    def create(
        cls,
        workspace: str | None,
        command: Iterable[str] = (),
        mounts: Iterable[str] = (),
        env: dict[str, str] | None = None,
    ) -> ServerScope:
        ws = posixpath.normpath(workspace) if workspace else None
        argv = list(command)
        named = _roots_of([*argv, *(env or {}).values()])
        roots = tuple(r for r in dict.fromkeys(named) if r != ws and r != "/")
        return cls(workspace=ws, roots=roots, data_mounts=_data_mounts(mounts, argv, ws, roots))

    @property
    def bases(self) -> tuple[str, ...]:
        return ((self.workspace,) if self.workspace else ()) + self.roots


@dataclass(frozen=True, slots=True)
class ArgPath:
    """One argument read as a path: where it is (`key`), what it says, whether it climbs."""

    key: str
    text: str
    climbs: bool


def arg_paths(items: Iterable[tuple[str, str]]) -> list[ArgPath]:
    """Every argument text that reads as a path: a whole one-line string (`notes/a.md`,
    `../x`), else the tokens of a longer text that hold a `/` (`cat ../srv/db.conf`)."""
    out: list[ArgPath] = []
    for key, text in items:
        if not text or len(text) > MAX_PATH_TEXT or "\n" in text:
            continue
        cands = (
            [text] if not any(c.isspace() for c in text) else [t for t in _tokens(text) if "/" in t]
        )
        for c in cands:
            c = c.removeprefix("file://")
            if c and "://" not in c:
                out.append(ArgPath(key, c, climbs(c)))
                if (d := decoded(c)) != c:
                    out.append(ArgPath(key, d, climbs(d)))
    return out


def decoded(text: str) -> str:
    """`text` with its percent-escapes undone (`..%2F..%2Fx`, twice-encoded `%252F`), as a
    server that url-decodes a name before it opens it reads it; `text` when it has none."""
    for _ in range(MAX_DECODES):
        if "%" not in text:
            break
        plain = unquote(text)
        if plain == text:
            break
        text = plain
    return text


def task_paths(text: str) -> list[str]:
    """Path-like tokens of the task: they hold a `/` or start with `.` or `~` (a sentence's
    full stop or colon after one is not part of it: "read docs/guide.md.")."""
    out: list[str] = []
    for t in _tokens(text):
        if t.endswith((".", ":", "!", "?")) and not t.endswith(".."):
            t = t[:-1]
        if t and ("/" in t or t.startswith((".", "~"))):
            out.append(t)
    return out


@dataclass
class CallScope:
    """A server's scope plus the paths the call's task names (lexically: a named link is in
    scope, where it leads is not unless that is named too)."""

    server: ServerScope
    named: list[str] = field(default_factory=list)  # absolute, normal: what the task names
    home: str | None = None  # ~ in the task, when known

    def targets(self, text: str, cwds: Iterable[str] = ()) -> list[str]:
        """Where a path text may land: itself when absolute, else joined to every base
        (workspace, roots, the processes' working directories)."""
        if text.startswith("~/") and self.home:
            text = self.home + text[1:]
        if text.startswith("/"):
            return [posixpath.normpath(text)]
        bases = dict.fromkeys([*self.server.bases, *cwds])
        return [posixpath.normpath(posixpath.join(b, text)) for b in bases if b.startswith("/")]

    def inside(self, path: str) -> bool:
        return any(under(path, r) for r in (*self.server.bases, *self.named))

    def describe(self) -> str:
        ws = self.server.workspace or "none"
        roots = ", ".join(self.server.roots) or "none"
        named = ", ".join(self.named[:5]) or "none"
        return f"workspace {ws}; roots {roots}; named by the task: {named}"


@dataclass(slots=True)
class Resolution:
    """Where a path really leads: `path` (lexical past the point it left the roots), the
    links met on the way (link path -> its ctime in ns), `left` once it left every root."""

    path: str
    links: dict[str, int]
    left: bool


@dataclass
class LinkResolver:
    """Resolves paths inside the server's bases on the host, with a memo and a bound."""

    bases: tuple[str, ...]
    budget: int = MAX_LSTATS
    _memo: dict[str, os.stat_result | None] = field(default_factory=dict)

    def _lstat(self, path: str) -> os.stat_result | None:
        if path not in self._memo:
            if self.budget <= 0:
                return None
            self.budget -= 1
            try:
                self._memo[path] = os.lstat(path)
            except OSError:
                self._memo[path] = None
        return self._memo[path]

    def resolve(self, path: str) -> Resolution | None:
        """None when `path` is in no base, or the walk met a loop or ran out of budget."""
        root = next((b for b in self.bases if under(path, b)), None)
        if root is None:
            return None
        cur = root
        rest = deque(p for p in path[len(root) :].split("/") if p)
        links: dict[str, int] = {}
        hops = 0
        while rest:
            name = rest.popleft()
            if name in ("", "."):
                continue
            nxt = posixpath.dirname(cur) if name == ".." else posixpath.join(cur, name)
            if not under(nxt, root):
                left = posixpath.normpath(posixpath.join(nxt, *rest))
                inside = next((b for b in self.bases if under(left, b)), None)
                return Resolution(left, links, left=inside is None)
            if name == "..":
                cur = nxt
                continue
            st = self._lstat(nxt)
            if st is None or not stat.S_ISLNK(st.st_mode):
                if st is None and self.budget <= 0:
                    return None
                cur = nxt
                continue
            hops += 1
            if hops > MAX_LINKS:
                return None
            links[nxt] = st.st_ctime_ns
            try:
                target = os.readlink(nxt)
            except OSError:
                return None
            if target.startswith("/"):
                dest = posixpath.normpath(target)
                if not under(dest, root):
                    left = posixpath.normpath(posixpath.join(dest, *rest))
                    inside = next((b for b in self.bases if under(left, b)), None)
                    return Resolution(left, links, left=inside is None)
                cur = root
                rest.extendleft(reversed([p for p in dest[len(root) :].split("/") if p]))
            else:
                rest.extendleft(reversed(target.split("/")))
        return Resolution(cur, links, left=False)
