"""`TreeView`: one pass over a `BehaviorTree` that the post-execution rules share.

Built once per call: it classifies every touched path once (sensitive, persistence,
privilege, canary; the policy caches verdicts per path, so a library opened on every call
costs a dict lookup) and keeps only the events that matched, plus every successful exec of
an observed process. A process with no exec of its own is a fork running its parent's
program and contributes none; a process seen without its exec event contributes (exe, argv).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..model import BehaviorTree, FileEvent, ProcessNode, SignalEvent
from .policy import CANARY, Policy
from .text import names_path

WRITE_FLAGS = frozenset({"write", "create", "truncate", "append"})
MODIFYING_OPS = frozenset({"unlink", "rename", "mkdir", "rmdir", "chmod", "symlink", "link"})
# a link's `target` is only named, not read or written: classified as a canary only (a new
# name for a canary reaches it unseen by path), never as a sensitive or persistence path
LINK_OPS = frozenset({"symlink", "link"})
# a process's root through /proc (/proc/self/root/etc/x is /etc/x): every traced process is in
# the sandbox's one pid and mount namespace, with no capability to chroot, so it is "/"
_PROC_ROOT = re.compile(r"^/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/root(?=/|$)")


def label(p: ProcessNode) -> str:
    return f"pid {p.pid} {p.exe or (p.argv[0] if p.argv else '?')}"


def describe(ev: FileEvent) -> str:
    what = ev.op if ev.op != "open" else ",".join(ev.flags) or "open"
    failed = f", failed {ev.result}" if ev.result < 0 else ""
    return f"({what}{failed})"


def is_write(ev: FileEvent) -> bool:
    return ev.op in MODIFYING_OPS or (ev.op == "open" and not WRITE_FLAGS.isdisjoint(ev.flags))


@dataclass(frozen=True, slots=True)
class FileHit:
    """A touched path that matched at least one class (`mask`: Policy.SENSITIVE | ...)."""

    proc: ProcessNode
    event: FileEvent
    path: str
    mask: int
    canary: str | None = None  # the canary path it denotes


def link_target(ev: FileEvent) -> str | None:
    """Where a symlink or hard link points, as an absolute path when it can be told: a
    relative symlink text is read against the link's own directory (lexically: links along
    the way are not followed). None for other events or a link of an unresolved name."""
    if ev.op not in LINK_OPS or ev.target is None:
        return None
    if ev.target.startswith("/"):
        return posixpath.normpath(ev.target)
    if not ev.resolved or not ev.path.startswith("/"):
        return None
    return posixpath.normpath(posixpath.join(posixpath.dirname(ev.path), ev.target))


@dataclass(frozen=True, slots=True)
class LinkHit:
    """A symlink or hard link the call made (`target`: `link_target()`, None if unknown)."""

    proc: ProcessNode
    event: FileEvent
    target: str | None


@dataclass(frozen=True, slots=True)
class SignalHit:
    """A signal a process sent, with the process it reached when that is in the tree."""

    proc: ProcessNode
    event: SignalEvent
    target: ProcessNode | None


@dataclass(slots=True)
class TreeView:
    tree: BehaviorTree
    by_key: dict[str, ProcessNode] = field(default_factory=dict)
    hits: list[FileHit] = field(default_factory=list)
    execs: list[tuple[ProcessNode, str, list[str]]] = field(default_factory=list)
    chmods: list[tuple[ProcessNode, FileEvent]] = field(default_factory=list)
    links: list[LinkHit] = field(default_factory=list)  # symlinks and hard links made
    signals: list[SignalHit] = field(default_factory=list)  # every signal sent, probes too

    @classmethod
    def build(cls, tree: BehaviorTree, policy: Policy, canaries: dict[str, str]) -> TreeView:
        view = cls(tree=tree, by_key={p.key: p for p in tree.processes})
        for p in tree.processes:
            for ev in p.files:
                if ev.op == "chmod":
                    view.chmods.append((p, ev))
                view._classify(p, ev, ev.path, policy, canaries)
                if ev.op in LINK_OPS:
                    target = link_target(ev)
                    view.links.append(LinkHit(p, ev, target))
                    if target is not None and target in canaries:  # a new name for a canary
                        view.hits.append(FileHit(p, ev, target, CANARY, target))
                elif ev.target:
                    view._classify(p, ev, ev.target, policy, canaries)
            view.execs.extend((p, exe, argv) for exe, argv in _execs_of(p, view.by_key))
            view.signals.extend(
                SignalHit(p, s, view.by_key.get(s.target_key or "")) for s in p.signals
            )
        return view

    def _classify(
        self, p: ProcessNode, ev: FileEvent, path: str, policy: Policy, canaries: dict[str, str]
    ) -> None:
        if ev.resolved or path.startswith("/"):
            if path.startswith("/proc/"):
                path = _PROC_ROOT.sub("", path, count=1) or "/"
            path = path.rstrip("/") or "/"
            mask = policy.classify(path)
            canary = path if path in canaries else None
        else:
            mask = policy.classify_text(path)
            canary = next((c for c in canaries if names_path([path], c)), None)
        if canary is not None:
            mask |= CANARY
        if mask:
            self.hits.append(FileHit(p, ev, path, mask, canary))

    def matching(self, mask: int) -> Iterator[FileHit]:
        return (h for h in self.hits if h.mask & mask)

    def ancestors(self, p: ProcessNode) -> Iterator[ProcessNode]:
        seen: set[str] = set()
        cur = self.by_key.get(p.parent or "")
        while cur is not None and cur.key not in seen:
            seen.add(cur.key)
            yield cur
            cur = self.by_key.get(cur.parent or "")


def _execs_of(p: ProcessNode, by_key: dict[str, ProcessNode]) -> list[tuple[str, list[str]]]:
    if p.learned != "observed":
        return []
    done = [(e.path, e.argv or [e.path]) for e in p.execs if e.result == 0]
    if done or p.execs:
        return done
    parent = by_key.get(p.parent or "")
    if p.exe and (parent is None or parent.exe != p.exe):
        return [(p.exe, p.argv or [p.exe])]
    return []
