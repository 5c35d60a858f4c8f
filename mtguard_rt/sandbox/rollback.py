"""Workspace rollback per call: a denied call leaves the workspace as it was before it.

`open_rollback()` snapshots the workspace once per sandbox, before its server starts
(`WorkspaceShadow`). Per call, under the server's lock (the server is quiescent): `begin()`
waits for the previous call to settle, retries entries a failed restore left and takes
changes made between calls (by the host's user, say) as the baseline;
`capture()`, once the monitor window has closed, finds what the call changed: the tree's file
events verified by stat ("tree"), or a stat scan of the whole workspace ("scan"). `settle()`
runs once the verdict is known: commit on allow, restore on an enforced deny, commit in
observe mode (nothing is rolled back). File work runs in a worker thread, shielded and
bounded; a failure becomes `RollbackReport.error` and an alert, never an exception on the
call path and never silence.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Literal, TypeVar

import anyio
import anyio.to_thread

from ..errors import RollbackError
from ..model import BehaviorTree, RollbackReport
from .plan import server_state_dir
from .settings import SandboxConfig
from .shadow import ShadowLimits, WorkspaceShadow

# A call's post-verification (an LLM judge at most, bounded by its own timeout) must settle
# within this before the next call on the server dispatches; past it the call counts as
# abandoned and is settled as a deny (restored in enforce mode).
PENDING_WAIT_S = 300.0
LISTED = 50  # changed paths named in a record
WRITE_FLAGS = frozenset(("write", "create", "truncate"))
T = TypeVar("T")
Mode = Literal["tree", "scan"]


def tree_paths(tree: BehaviorTree, workspace: str) -> tuple[set[str] | None, str | None]:
    """The workspace paths (relative) a call's file events may have changed, or (None, why)
    when the tree cannot tell them all and the workspace must be scanned instead."""
    if not tree.traced:
        return None, "the call was not traced"
    lost = {k: n for k, n in tree.drops.items() if n}
    if lost:
        return None, f"the monitor lost events ({lost})"
    prefix = workspace.rstrip("/") + "/"
    out: set[str] = set()
    for proc in tree.processes:
        for ev in proc.files:
            if ev.op == "chdir" or (ev.op == "open" and WRITE_FLAGS.isdisjoint(ev.flags)):
                continue
            # a link's target is only named (its new name is the change), a rename's is written
            for path in (ev.path, None if ev.op in ("symlink", "link") else ev.target):
                if path is None:
                    continue
                if not ev.resolved or not path.startswith("/"):
                    return None, f"a path the monitor could not resolve ({path!r})"
                path = os.path.normpath(path)
                if path == prefix[:-1]:
                    out.add("")
                elif path.startswith(prefix):
                    out.add(path[len(prefix) :])
    return out, None


def _merge(report: RollbackReport, more: RollbackReport) -> None:
    """Fold another root's report into `report`: a failure anywhere fails the whole."""
    both = [*report.paths, *more.paths]
    report.paths = both[:LISTED]
    report.unlisted += more.unlisted + max(0, len(both) - LISTED)
    for field in ("created", "modified", "deleted", "scanned", "synced"):
        setattr(report, field, getattr(report, field) + getattr(more, field))
    report.failed = [*report.failed, *more.failed][:LISTED]
    report.fallback = report.fallback or more.fallback
    report.ms = round(report.ms + more.ms, 3)
    if more.action == "failed":
        report.action = "failed"
        report.error = report.error or more.error


def _under(rel: str, roots: set[str]) -> bool:
    return any(rel == r or rel.startswith(r + "/") or not r for r in roots)


class _Pending:
    def __init__(self, call_id: str, report: RollbackReport) -> None:
        self.call_id = call_id
        self.report = report
        self.changed: list[str] | None = None  # None until captured
        self.settling = False  # one settle per call, even if two parties try
        self.settled = anyio.Event()


class WorkspaceRollback:
    """One sandbox's rollback state. Create with `open_rollback()`."""

    def __init__(
        self,
        shadow: WorkspaceShadow,
        mode: Mode,
        *,
        observe: bool,
        timeout_s: float,
        prefix: str | None = None,
    ) -> None:
        self.shadow = shadow
        self.mode = mode
        self.observe = observe
        self.timeout_s = timeout_s
        # the root's path in the tree and in reports: the shadow's own unless the sandbox
        # sees the root elsewhere (a package overlay's staging mount on the host)
        self.workspace = prefix or shadow.root
        self.dirty: dict[str, str] = {}  # entries a failed restore left: path -> why
        self.broken: str | None = None  # set when the shadow no longer holds the baseline
        self.snapshot_ms = 0.0
        self._pending: _Pending | None = None
        # more roots rolled back with this one (the server's own state directory, its
        # package overlays): each follows the same protocol; reports merge into this root's
        self.extra: list[WorkspaceRollback] = []
        self._room: tuple[str, ShadowLimits, list[str], list[WorkspaceShadow]] | None = None

    async def add_overlay(
        self, merged: str, lower: str, upper: str, inside: str | None = None
    ) -> None:
        """Cover a package overlay (mounted at `merged` on the host, at `inside` in the
        sandbox: `lower`'s path by default) from now on; before the server runs, so its
        baseline is the package as installed."""
        assert self._room is not None, "add_overlay() on a rollback open_rollback() made"
        base, limits, stores, shadows = self._room
        stores.append(_store(lower, base))
        try:
            shadow = await anyio.to_thread.run_sync(
                WorkspaceShadow.create, merged, stores[-1], limits, self.timeout_s, (lower, upper)
            )
        except OSError as exc:
            raise RollbackError(lower, f"snapshot failed: {exc.strerror}: {exc.filename}") from exc
        shadows.append(shadow)
        self.extra.append(WorkspaceRollback(shadow, self.mode, observe=self.observe,
                                            timeout_s=self.timeout_s,
                                            prefix=inside or lower))  # fmt: skip

    def _abs(self, rel: str) -> str:
        return f"{self.workspace}/{rel}" if rel else self.workspace

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        with anyio.CancelScope(shield=True):  # never abandon a half-done restore
            result = await anyio.to_thread.run_sync(fn, *args)
        return result

    # -- the protocol the supervisor follows ---------------------------------------------
    async def begin(self, call_id: str) -> None:
        """Before the call's dispatch, under the server lock."""
        await self._begin(call_id)
        for other in self.extra:
            await other._begin(call_id)

    async def capture(self, call_id: str, tree: BehaviorTree) -> None:
        """After the call's window closed, still under the server lock."""
        for each in (self, *self.extra):
            await each._capture_call(call_id, tree)

    async def settle(self, call_id: str, *, deny: bool) -> RollbackReport | None:
        """Once the verdict is known: restore on an enforced deny, else commit."""
        report = await self._settle_call(call_id, deny=deny)
        for other in self.extra:
            more = await other._settle_call(call_id, deny=deny)
            if report is not None and more is not None:
                _merge(report, more)
        return report

    async def _begin(self, call_id: str) -> None:
        prev = self._pending
        if prev is not None and not prev.settled.is_set():
            if prev.changed is not None:
                with anyio.move_on_after(PENDING_WAIT_S):
                    await prev.settled.wait()
            if not prev.settled.is_set():  # its verdict never came: fail closed
                await self._settle(prev, deny=True)
        report = RollbackReport(mode=self.mode, action="committed", workspace=self.workspace)
        self._pending = _Pending(call_id, report)
        if self.broken is None:
            await self._timed(report, self._before, report)

    async def _capture_call(self, call_id: str, tree: BehaviorTree) -> None:
        pending = self._pending
        if pending is None or pending.call_id != call_id or self.broken is not None:
            return
        paths, why = (None, None) if self.mode == "scan" else tree_paths(tree, self.workspace)
        pending.report.fallback = why
        await self._timed(pending.report, self._capture, pending, paths)

    async def _settle_call(self, call_id: str, *, deny: bool) -> RollbackReport | None:
        pending = self._pending
        if pending is None or pending.call_id != call_id:
            return None
        if not pending.settled.is_set():
            await self._settle(pending, deny=deny)
        return pending.report

    # -- the work --------------------------------------------------------------------------
    async def _timed(self, report: RollbackReport, fn: Callable[..., None], *args: object) -> None:
        t0 = time.perf_counter()
        try:
            await self._run(fn, *args)
        except (RollbackError, OSError) as exc:
            why = exc.why if isinstance(exc, RollbackError) else f"{exc.strerror}: {exc.filename}"
            self.broken = why  # the baseline is unknown or half-updated from here on
            report.error = why
            report.action = "failed"
        finally:
            report.ms += round((time.perf_counter() - t0) * 1000, 3)

    def _before(self, report: RollbackReport) -> None:
        if self.dirty:
            self.dirty = self.shadow.restore(sorted(self.dirty), self.timeout_s)
            if self.dirty:
                report.failed = [f"{self._abs(r)}: {why}" for r, why in self.dirty.items()]
                report.failed = report.failed[:LISTED]
                report.error = (
                    f"{len(self.dirty)} entries an earlier failed restore left still differ "
                    "from the baseline"
                )
        # changes made since the last call (the user editing the project) become the baseline,
        # so a restore never reverts them: every entry in scan mode; entries created, deleted
        # or renamed (seen through their directories) in tree mode
        changed, _ = self.shadow.changes(self.timeout_s, None if self.mode == "scan" else set())
        changed = [r for r in changed if not _under(r, set(self.dirty))]
        report.synced = sum(self.shadow.classify(r) != "touched" for r in changed)
        self.shadow.commit(changed, self.timeout_s)

    def _capture(self, pending: _Pending, paths: set[str] | None) -> None:
        report = pending.report
        changed, report.scanned = self.shadow.changes(self.timeout_s, paths)
        listed: list[str] = []
        counts = {"created": 0, "modified": 0, "deleted": 0, "touched": 0}
        for rel in changed:
            kind = self.shadow.classify(rel)
            counts[kind] += 1
            if kind != "touched":
                listed.append(self._abs(rel))
        report.created, report.modified = counts["created"], counts["modified"]
        report.deleted = counts["deleted"]
        report.paths, report.unlisted = listed[:LISTED], max(0, len(listed) - LISTED)
        pending.changed = changed

    async def _settle(self, pending: _Pending, *, deny: bool) -> None:
        if pending.settling:
            await pending.settled.wait()
            return
        pending.settling = True
        report = pending.report
        try:
            if self.broken is not None:
                report.action = "failed"
                report.error = report.error or f"rollback unavailable: {self.broken}"
                return
            if pending.changed is None:  # dispatched but never captured (an error): look now
                await self._timed(report, self._capture, pending, None)
                if pending.changed is None:
                    return
            restore = deny and not self.observe
            await self._timed(report, self._apply, pending, restore)
            if report.action != "failed":
                report.action = "restored" if restore else ("kept" if deny else "committed")
        finally:
            pending.settled.set()

    def _apply(self, pending: _Pending, restore: bool) -> None:
        changed = pending.changed or []
        report = pending.report
        if not restore:  # never take what a failed restore left as the baseline
            self.shadow.commit([r for r in changed if not _under(r, set(self.dirty))],
                               self.timeout_s)  # fmt: skip
            return
        failed = self.shadow.restore(changed, self.timeout_s)
        if failed:
            self.dirty.update(failed)
            report.action = "failed"
            report.failed = [f"{self._abs(r)}: {why}" for r, why in failed.items()][:LISTED]
            first = report.failed[0]
            report.error = (
                f"{len(failed)} of {len(changed)} changed entries could not be restored "
                f"(first: {first})"
            )


@asynccontextmanager
async def open_rollback(
    config: SandboxConfig, *, observe: bool = False, name: str | None = None
) -> AsyncIterator[WorkspaceRollback | None]:
    """The rollback for a sandbox with `config` (None when `rollback = "off"`): the workspace,
    and with the server's `name` its persistent state directory too (plan.py), are snapshot
    on entry; the shadow copies are removed on exit."""
    if config.rollback == "off":
        yield None
        return
    root, base, limits = _prepare(config)
    roots = [root]
    if name is not None:
        data = os.path.join(server_state_dir(config.state_dir, name), "data")
        os.makedirs(data, mode=0o700, exist_ok=True)
        roots.append(data)
    stores: list[str] = []
    shadows: list[WorkspaceShadow] = []
    try:
        t0 = time.perf_counter()
        for each in roots:
            stores.append(_store(each, base))
            try:
                shadows.append(await anyio.to_thread.run_sync(
                    WorkspaceShadow.create, each, stores[-1], limits, config.rollback_timeout_s
                ))  # fmt: skip
            except OSError as exc:
                why = f"snapshot failed: {exc.strerror}: {exc.filename}"
                raise RollbackError(each, why) from exc
        rollback, *extra = [
            WorkspaceRollback(s, config.rollback, observe=observe,
                              timeout_s=config.rollback_timeout_s)
            for s in shadows
        ]  # fmt: skip
        rollback.extra = extra
        rollback._room = (base, limits, stores, shadows)
        rollback.snapshot_ms = round((time.perf_counter() - t0) * 1000, 3)
        yield rollback
    finally:
        for shadow in shadows:
            shadow.close()
        with anyio.CancelScope(shield=True):
            for store in stores:
                await anyio.to_thread.run_sync(shutil.rmtree, store, True)


def _store(root: str, base: str) -> str:
    try:
        return tempfile.mkdtemp(prefix="mtguard-shadow-", dir=base)
    except OSError as exc:
        raise RollbackError(root, f"cannot create the shadow in {base}: {exc.strerror}") from exc


def _prepare(config: SandboxConfig) -> tuple[str, str, ShadowLimits]:
    """Check the rollback settings: (workspace, where shadows go, limits). A shadow is a
    private directory (mode 0700) made there by `_store`."""
    if not config.workspace:
        raise RollbackError("(none)", f'rollback = "{config.rollback}" needs a [sandbox] workspace')
    root = os.path.normpath(os.path.abspath(config.workspace))
    if not os.path.isdir(root):
        raise RollbackError(root, "the workspace is not a directory")
    for knob, value in (("rollback_max_files", config.rollback_max_files),
                        ("rollback_max_mb", config.rollback_max_mb),
                        ("rollback_timeout_s", config.rollback_timeout_s)):  # fmt: skip
        if value <= 0:
            raise RollbackError(root, f"[sandbox] {knob} must be positive, not {value}")
    base = os.path.realpath(config.rollback_dir or tempfile.gettempdir())
    real = os.path.realpath(root)
    if base == real or base.startswith(real + "/"):
        raise RollbackError(root, f"the shadow directory {base} is inside the workspace")
    limits = ShadowLimits(
        max_files=config.rollback_max_files, max_bytes=config.rollback_max_mb << 20
    )
    return root, base, limits
