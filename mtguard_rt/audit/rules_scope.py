"""Post-execution rule `scope-escape`: a file effect the call's arguments led out of its scope.

The scope (`audit.scope`) is the server's workspace and roots plus the paths the task and
the arguments name. An effect (a read of a file, a write, create, unlink, rename, chmod) on a
path outside it is an escape when the call reached it: an argument that climbs out with `..`
(`../srv/x`, `docs/../../x`), an argument whose path goes through a link in the workspace to
outside, an argument naming a step of the effect's path from a link out of the workspace on
(`album=trip` for photos/trip/x where photos/trip is a link out: the server built the path
from it), or a link made
during this call (seen by the kernel, or by its ctime on the host) that an effect went
through. What the server opens on its own outside the workspace (its
code, runtime, state, /proc) is no escape; a listing (a directory opened to read) shows names,
not content, and is not counted. Evidence: which argument, which path it became, the scope.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from typing import Any

from ..model import BehaviorTree, FileEvent, ProcessNode, Violation
from .context import CallContext
from .policy import Policy
from .rules_files import own_process_state, reads, result_text, took_effect
from .rules_pre import violation
from .rules_secrets import data_reads
from .scope import ArgPath, CallScope, LinkResolver, ServerScope, arg_paths, task_paths, under
from .scope_reads import MAX_HOST_READS, disclosed_line, explained, host_content, on_mount
from .text import names_path
from .treeview import TreeView, describe, label

RULE = "scope-escape"
EFFECT_OPS = frozenset({"open", "unlink", "rename", "mkdir", "rmdir", "chmod"})
MIN_PREFIX_DEPTH = 2  # an argument naming /x matches only /x itself, not all below it
MIN_SUFFIX_DEPTH = 2  # components an unknown-base match must share (`srv/x.json`)
# inode times come from the kernel's coarse clock (one tick behind the fine one at most):
# a link made just after the window opened may carry a ctime this much before its start
CTIME_SLACK_NS = 20_000_000
SYSTEM_DIRS = ("/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/etc/", "/opt/")
MIN_NAMED_STEP = 3  # characters of an argument that names a step of a path through a link


def _depth(path: str) -> int:
    return len([p for p in path.split("/") if p])


def _abs(p: ProcessNode, ev: FileEvent, path: str) -> str | None:
    if path.startswith("/"):
        return posixpath.normpath(path)
    if p.cwd and p.cwd.startswith("/"):
        return posixpath.normpath(posixpath.join(p.cwd, path))
    return None


def _reaches(target: str, path: str) -> bool:
    return path == target or (_depth(target) >= MIN_PREFIX_DEPTH and under(path, target))


def _listing(ev: FileEvent, path: str) -> bool:
    """A read-only open of a directory (host-side stat, content never read)."""
    if ev.op != "open" or not ev.flags or ev.flags != ["read"]:
        return False
    return os.path.isdir(path)


def _names_steps(text: str, steps: list[str], at: int = 0) -> bool:
    """Are the components of `text` a run of `steps` that ends at step `at` or below it (the
    last may drop its extension)? `docs/setup.md` names repo/docs/setup.md through a link at
    setup.md or at docs. A text shorter than `MIN_NAMED_STEP` names nothing (`1`, `a`)."""
    want = [c for c in posixpath.normpath(text).split("/") if c not in ("", ".")]
    if not want or ".." in want or len(text) < MIN_NAMED_STEP:
        return False
    for i in range(max(0, at - len(want) + 1), len(steps) - len(want) + 1):
        run = steps[i : i + len(want)]
        last = run[-1]
        if run[:-1] == want[:-1] and want[-1] in (last, posixpath.splitext(last)[0]):
            return True
    return False


def _effects(tree: BehaviorTree) -> Iterator[tuple[ProcessNode, FileEvent, str]]:
    for p in tree.processes:
        for ev in p.files:
            if str(ev.op) not in EFFECT_OPS or not took_effect(ev):
                continue
            for raw in (ev.path, ev.target) if ev.op == "rename" else (ev.path,):
                if raw and (path := _abs(p, ev, raw)) is not None:
                    yield p, ev, path


def _made_links(view: TreeView, bases: tuple[str, ...]) -> set[str]:
    """Symlinks the kernel saw this call make in a base (absolute link paths)."""
    out: set[str] = set()
    for hit in view.links:
        ev = hit.event
        if ev.op == "symlink" and took_effect(ev) and (a := _abs(hit.proc, ev, ev.path)):
            if any(under(a, b) for b in bases):
                out.add(a)
    return out


class _Checker:
    """One call's scope, argument paths and resolver, shared by all its events."""

    def __init__(
        self, ctx: CallContext, server: ServerScope, view: TreeView, result: dict[str, Any]
    ) -> None:
        self.ctx = ctx
        self.result = result_text(result)
        self.data = set(data_reads(view)) if server.data_mounts else set()
        self.host_reads = 0
        tree = self.tree = view.tree
        self.cwds = sorted({p.cwd for p in tree.processes if p.cwd and p.cwd.startswith("/")})
        self.scope = CallScope(server=server)
        self.args = arg_paths(ctx.arg_items)
        task = ctx.task_text or ""
        self.task = [task] if task else []
        for text in task_paths(task):
            self.scope.named.extend(self.scope.targets(text, self.cwds))
        # An absolute path an argument spells out is not reached by climbing or a link, so
        # it never fires; it does not widen the scope either (`{"path": "../x", "root": "/"}`
        # would otherwise excuse the climb: the arguments are what an attacker steers).
        self.resolver = LinkResolver(server.bases)
        self.made = _made_links(view, server.bases)
        self.earlier = set(server.made)  # made by this server in an earlier call
        wall = tree.wall_offset_ns
        self.since = (
            tree.window_start_ns + wall - CTIME_SLACK_NS if wall and tree.window_start_ns else None
        )
        self._arg_links: list[tuple[ArgPath, str, str]] | None = None

    def _outside(self, path: str) -> bool:
        return not self.scope.inside(path) and not names_path(self.task, path)

    def arg_links(self) -> list[tuple[ArgPath, str, str]]:
        """(argument, its path, where its links lead) for every argument path in a base that
        resolves out of the scope."""
        if self._arg_links is None:
            self._arg_links = []
            for a in self.args:
                for t in self.scope.targets(a.text, self.cwds):
                    res = self.resolver.resolve(t)
                    if res is not None and res.left and self._outside(res.path):
                        self._arg_links.append((a, t, res.path))
        return self._arg_links

    def names_link(self, path: str, links: dict[str, int]) -> tuple[ArgPath, str] | None:
        """An argument that names the steps of `path` from a link on (the link itself, or
        what the effect reached below it: `album=trip` for photos/trip/x.exif, a file name
        without its extension): the server built the path from it, so the argument led the
        effect through the link, whatever prefix the server added."""
        for link in links:
            if not under(path, link):
                continue
            base = next((b for b in self.scope.server.bases if under(link, b)), "/")
            steps = [c for c in path[len(base) :].split("/") if c]
            at = len([c for c in link[len(base) :].split("/") if c]) - 1  # the link's step
            for a in self.args:
                if _names_steps(a.text, steps, at):
                    return a, link
        return None

    def climbed(self, path: str) -> tuple[ArgPath, str] | None:
        for a in self.args:
            if not a.climbs:
                continue
            for t in self.scope.targets(a.text, self.cwds):
                if _reaches(t, path):
                    return a, t
            # resolved against a base we do not know (the server's own data directory): the
            # climbed-to part, at least a directory and a name (`srv/x.json`, not `x.json`:
            # a bare name would match the server's own package.json anywhere), the name
            # perhaps without the extension the server adds (`private/vpn/ceo` for ceo.ovpn),
            # or a directory the server joined a name to (`../../srv/auth` + robot.json), not
            # one of the system's (a runtime's own files below a climbed-to `lib/python3`)
            rest = posixpath.normpath(a.text)
            while rest.startswith("../"):
                rest = rest[3:]
            if (
                not a.text.startswith("/")
                and _depth(rest) >= MIN_SUFFIX_DEPTH
                and not rest.startswith("..")
                and (
                    path.endswith("/" + rest)
                    or posixpath.splitext(path)[0].endswith("/" + rest)
                    or (f"/{rest}/" in path and not path.startswith(SYSTEM_DIRS))
                )
            ):
                return a, path
        return None

    def unasked_read(self, ev: FileEvent, path: str, what: str) -> str | None:
        """A read of a data mount outside the scope whose content reaches the result, which
        nothing of the call explains (`scope_reads`)."""
        mount = on_mount(path, self.scope.server.data_mounts)
        if mount is None or path not in self.data or not reads(ev) or _listing(ev, path):
            return None
        call = self.ctx.call

        def reaches(a: ArgPath) -> bool:
            return any(_reaches(t, path) for t in self.scope.targets(a.text, self.cwds))

        if explained(path, self.args, reaches, self.ctx.task_words, call.tool, call.server):
            return None
        content = self.ctx.read_back.get(path)
        if content is None and self.host_reads < MAX_HOST_READS:
            self.host_reads += 1
            content = host_content(path, mount)
        line = disclosed_line(content, self.result) if content and self.result else None
        if line is None:
            return None
        return (
            f"the call read {path} on the mount {mount}, outside its scope, and line {line} "
            f"of it reaches the result; neither an argument, the task nor the tool's name "
            f"names that file: {what}"
        )

    def check(self, p: ProcessNode, ev: FileEvent, path: str) -> str | None:
        """Why this effect is an escape, or None."""
        if own_process_state(path) or path.startswith(("/proc/", "/sys/", "/dev/")):
            return None
        what = f"{label(p)} {ev.op} {path} {describe(ev)}"
        if self._outside(path):
            if (hit := self.climbed(path)) is not None:
                a, t = hit
                if _listing(ev, path):
                    return None
                return f"argument {a.key}={a.text!r} climbs out of its base to {t}: {what}"
            for a, t, real in self.arg_links():
                if _reaches(real, path) and not _listing(ev, path):
                    return f"argument {a.key}={a.text!r} is {t}, a link to {real}: {what}"
            return self.unasked_read(ev, path, what)
        if not any(under(path, b) for b in self.scope.server.bases):
            return None  # named by the call, outside any base: nothing to resolve
        res = self.resolver.resolve(path)
        if res is None or not res.left or not self._outside(res.path):
            return None
        if _listing(ev, res.path):
            return None
        via = ", ".join(res.links) or "?"
        # the argument's own path goes through the link (`shared/x`, `assets/logo.svg`); a
        # link merely below a directory it names (node_modules/x in the workspace) does not
        for a, t, _ in self.arg_links():
            if _reaches(t, path):
                return (
                    f"argument {a.key}={a.text!r} is {t}; through the link {via} the "
                    f"effect lands on {res.path}: {what}"
                )
        if (named := self.names_link(path, res.links)) is not None:
            arg, link = named
            step = path[len(posixpath.dirname(link)) + 1 :]
            return (
                f"argument {arg.key}={arg.text!r} names {step!r}"
                f" through the link {link}, which leads out of the scope to {res.path}: {what}"
            )
        fresh = [
            link
            for link, ctime in res.links.items()
            if link in self.made or (self.since is not None and ctime >= self.since)
        ]
        if fresh:
            return f"a link made during the call ({', '.join(fresh)}) leads to {res.path}: {what}"
        if earlier := [link for link in res.links if link in self.earlier]:
            return (
                f"a link this server made in an earlier call ({', '.join(earlier)}) leads to "
                f"{res.path}: {what}"
            )
        return None


def scope_escape(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    """File effects outside the call's scope that its arguments (or a link it made) led to."""
    server = ctx.scope
    if not isinstance(server, ServerScope) or not server.bases:
        return []
    checker = _Checker(ctx, server, view, result)
    server.made |= checker.made
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for p, ev, path in _effects(view.tree):
        if (str(ev.op), path) in seen:
            continue
        seen.add((str(ev.op), path))
        if (why := checker.check(p, ev, path)) is not None:
            lines.append(why)
    if not lines:
        return []
    reason = "a file effect outside the call's scope, reached from its arguments or a new link"
    return [violation(RULE, policy, "post", reason, [f"scope: {checker.scope.describe()}", *lines])]
