"""Workspace rollback for real (issue 8): a sandboxed terminal server, the eBPF monitor and the
balanced policy. A call that writes, truncates, creates, deletes and renames files in the
workspace and then reads the canary key is denied after execution; with `rollback` on, the
workspace is byte-for-byte as the last allowed call left it (hash manifest). A write through
an fd opened in an earlier call is caught by the scan mode and, as documented, not by the
tree mode; a restore the filesystem refuses (an immutable file) is reported in the record
and alerted, and retried before the next call; observe mode rolls nothing back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt import CallDenied, GuardConfig, RollbackError, open_guard
from mtguard_rt.model import AuditRecord
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.telemetry.explain import explain_record
from mtguard_rt.telemetry.view_text import render_text
from tests.audit_records import last_call

from ..sandbox.test_rollback_unit import manifest, populate
from .conftest import READ_CANARY, SERVERS, TERMINAL

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.root,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 30.0
VANDALISE = (
    "printf 'evil()\\n' >> src/pkg/mod.py; : > notes.txt; echo new > created.txt; "
    "mkdir -p newdir/sub && echo x > newdir/sub/f; rm -r old; rm data.bin; "
    "mv src moved; mv link link2; chmod 600 keep.txt; "
)


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    populate(ws)
    (ws / "keep.txt").write_text("v1\n")
    for path in [ws, *ws.rglob("*")]:
        os.chown(path, 1000, 1000, follow_symlinks=False)  # the sandbox runs as uid 1000
    return ws


def config(ws: Path, mode: str, *, observe: bool = False) -> GuardConfig:
    return GuardConfig(
        audit_log=None,
        observe=observe,
        telemetry={"exporter": "off"},
        sandbox=SandboxConfig(mounts=[str(SERVERS)], workspace=str(ws), rollback=mode),  # type: ignore[arg-type]
    )


def lift_quarantine(guard: Any) -> None:
    """A canary read quarantines the server (no later call is served); these tests go on
    with the same sandbox to check the rollback baseline, as an operator who inspected it
    would: lift the quarantine by hand."""
    for supervisor in guard.servers.values():
        supervisor.quarantined = None


async def run(guard: Any, server: Any, command: str) -> AuditRecord:
    """One call; its record whether it was allowed or denied."""
    with anyio.fail_after(CALL_BOUND_S):
        try:
            await server.call_tool("run_command", {"command": command})
        except CallDenied:
            pass
    record: AuditRecord = last_call(guard.records)
    assert record.arguments == {"command": command}
    return record


@pytest.mark.parametrize("mode", ["tree", "scan"])
async def test_a_denied_call_leaves_the_workspace_byte_for_byte(tmp_path: Path, mode: str) -> None:
    ws = workspace(tmp_path)
    async with open_guard(config(ws, mode)) as guard, guard.connect(TERMINAL) as server:
        allowed = await run(guard, server, "echo v2 > keep.txt; echo fine > added.txt")
        assert allowed.decision == "allow" and allowed.rollback is not None
        assert (allowed.rollback.action, allowed.rollback.mode) == ("committed", mode)
        assert allowed.rollback.created == 1 and allowed.rollback.modified == 1
        assert allowed.rollback.fallback is None  # tree mode: the call's events named it all
        baseline = manifest(ws)
        assert (ws / "keep.txt").read_text() == "v2\n"  # the allowed change is kept

        denied = await run(guard, server, VANDALISE + READ_CANARY)
        assert (denied.decision, denied.phase, denied.rules[0]) == (
            "deny",
            "post",
            "canary-touched",
        )
        assert (ws / "moved").exists() is False
        assert manifest(ws) == baseline
        report = denied.rollback
        assert report is not None and report.action == "restored" and report.error is None
        assert (report.created, report.deleted, report.modified) == (8, 8, 2)
        assert f"{ws}/created.txt" in report.paths and f"{ws}/old/deep/f" in report.paths
        assert report.ms > 0
        shown = explain_record(denied)
        assert f"workspace rollback ({mode}): restored, the workspace is back" in shown
        assert f"{ws}/created.txt" in render_text([denied])
        # `rm -r` unlinks relative to directory fds the monitor cannot always name: tree mode
        # then scans the whole workspace rather than guess
        assert report.fallback is None or "could not resolve" in report.fallback

        # the restored workspace is the baseline for what follows
        lift_quarantine(guard)
        again = await run(guard, server, "cat keep.txt src/pkg/mod.py")
        assert again.decision == "allow" and again.rollback is not None
        assert (again.rollback.created, again.rollback.modified, again.rollback.deleted) == (
            0,
            0,
            0,
        )
        assert again.rollback.synced == 0


@pytest.mark.parametrize("mode", ["tree", "scan"])
async def test_a_write_through_an_fd_from_an_earlier_call(tmp_path: Path, mode: str) -> None:
    ws = workspace(tmp_path)
    # opens log.txt now and writes through that fd once the next call opens the fifo; its
    # process outlives the call
    late_writer = "mkfifo gate; (exec 3>>log.txt; read x < gate; echo late >&3) >/dev/null 2>&1 &"
    async with open_guard(config(ws, mode)) as guard, guard.connect(TERMINAL) as server:
        first = await run(guard, server, late_writer)
        assert first.decision == "allow" and first.rollback is not None
        assert first.rollback.action == "committed"
        denied = await run(guard, server, f"echo go > gate; sleep 0.5; {READ_CANARY}")
        assert denied.decision == "deny" and denied.rollback is not None
    assert (ws / "gate").is_fifo()
    if mode == "scan":  # the scan sees log.txt change although no event of this call names it
        assert f"{ws}/log.txt" in denied.rollback.paths
        assert (ws / "log.txt").read_text() == ""
    else:  # documented: the tree only knows paths opened during the call
        assert f"{ws}/log.txt" not in denied.rollback.paths
        assert (ws / "log.txt").read_text() == "late\n"


async def test_a_refused_restore_is_reported_alerted_and_retried(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    alerts: list[str | None] = []
    target = ws / "notes.txt"

    async def make_immutable() -> None:  # the host's admin locks the file mid-call
        while target.read_text() != "tampered":  # noqa: ASYNC110 - polls a host file
            await anyio.sleep(0.02)
        await anyio.run_process(["chattr", "+i", str(target)])

    async with open_guard(config(ws, "scan")) as guard:
        sink = guard.sink

        def spy(record: AuditRecord, traceparent: str | None, alert: str | None) -> None:
            alerts.append(alert)  # the alert the supervisor raised with the record
            sink(record, traceparent, alert)

        guard.sink = spy  # type: ignore[method-assign]
        async with guard.connect(TERMINAL) as server:
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(make_immutable)
                    cmd = "printf tampered > notes.txt; echo x > dropped.txt; sleep 1.5; "
                    denied = await run(guard, server, cmd + READ_CANARY)
                report = denied.rollback
                assert denied.decision == "deny" and report is not None
                assert report.action == "failed" and alerts[-1] == "rollback-failed"
                assert f"workspace rollback failed: {report.error}" in denied.reasons
                assert report.failed == [f"{target}: Operation not permitted"]
                assert report.error == (
                    "1 of 3 changed entries could not be restored "
                    f"(first: {target}: Operation not permitted)"
                )
                assert not (ws / "dropped.txt").exists()  # everything else was restored

                lift_quarantine(guard)
                still = await run(guard, server, "true")  # retried before the call: still refused
                assert still.rollback is not None and still.rollback.error is not None
                assert "an earlier failed restore left" in still.rollback.error
                assert alerts[-1] == "rollback-failed"
            finally:
                await anyio.run_process(["chattr", "-i", str(target)])
            fixed = await run(guard, server, "true")
            assert fixed.rollback is not None and fixed.rollback.error is None
            assert alerts[-1] is None
    assert target.read_text() == "keep me\n"


async def test_observe_mode_rolls_nothing_back(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    async with open_guard(config(ws, "scan", observe=True)) as guard:
        async with guard.connect(TERMINAL) as server:
            record = await run(guard, server, VANDALISE + READ_CANARY)
    assert (record.decision, record.mode) == ("deny", "observe")
    assert record.rollback is not None and record.rollback.action == "kept"
    assert f"{ws}/created.txt" in record.rollback.paths
    assert (ws / "created.txt").read_text() == "new\n" and (ws / "moved").is_dir()


async def test_a_snapshot_over_the_bounds_fails_connect_before_a_container_starts(
    tmp_path: Path,
) -> None:
    ws = workspace(tmp_path)
    cfg = config(ws, "scan")
    cfg.sandbox.rollback_max_files = 5
    cfg.sandbox.rollback_dir = str(tmp_path / "shadows")
    (tmp_path / "shadows").mkdir()
    async with open_guard(cfg, monitor=False) as guard:
        with pytest.raises(RollbackError, match=r"more than 5 entries \(raise \[sandbox\]"):
            async with guard.connect(TERMINAL):
                pass
        assert guard.servers == {}
    assert not list((tmp_path / "shadows").iterdir())  # the shadow went with the failure
