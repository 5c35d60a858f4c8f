"""The JSON Lines audit log: round trip, concurrent appends, malformed lines with line numbers."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mtguard_rt.errors import AuditLogError, GuardError, TelemetryError
from mtguard_rt.telemetry import AuditLog, read_audit_log

from .fixtures import allowed_record, denied_record, pre_denied_record


@pytest.mark.anyio
async def test_records_round_trip_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "audit.jsonl"
    records = [denied_record(), allowed_record(), pre_denied_record()]
    async with AuditLog(path) as audit:
        for r in records:
            await audit.write(r)
    assert list(read_audit_log(path)) == records
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["call_id"] == "7"


@pytest.mark.anyio
async def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as audit:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(audit.write, denied_record(str(i)))
    ids = sorted(int(r.call_id) for r in read_audit_log(path))
    assert ids == list(range(50))


def test_each_record_is_flushed_before_close(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path)
    audit.write_sync(allowed_record())
    assert [r.call_id for r in read_audit_log(path)] == ["8"]  # visible while still open
    audit.close()


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as audit:
        audit.write_sync(allowed_record())
    with path.open("a") as f:
        f.write("\n{\"call_id\": \"broken\"\n")
    reader = read_audit_log(path)
    assert next(reader).call_id == "8"
    with pytest.raises(AuditLogError) as info:
        next(reader)
    assert info.value.line == 3 and info.value.path == str(path)
    assert str(info.value).startswith(f"{path}:3: not an audit record")
    assert isinstance(info.value, GuardError)


def test_missing_log_is_a_guard_error(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="cannot read the audit log"):
        list(read_audit_log(tmp_path / "nope.jsonl"))
