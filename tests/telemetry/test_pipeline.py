"""Pipeline behaviour that needs no receiver: bad records, console output, emit after close."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mtguard_rt.telemetry import TelemetryConfig, open_telemetry
from mtguard_rt.telemetry.spans import span_count

from .fixtures import allowed_record, denied_record


def file_config(tmp_path: Path, **kw: object) -> TelemetryConfig:
    return TelemetryConfig(
        exporter="file", traces_file=str(tmp_path / "t.jsonl"),
        logs_file=str(tmp_path / "a.jsonl"), **kw,  # type: ignore[arg-type]
    )


@pytest.mark.anyio
async def test_a_record_that_cannot_be_built_is_counted_and_the_pipeline_survives(
    tmp_path: Path,
) -> None:
    broken = denied_record("broken")
    broken.ts = float("nan")  # a corrupt start time: the span builder cannot convert it
    with anyio.fail_after(10):
        async with open_telemetry(file_config(tmp_path)) as tel:
            assert tel.emit(broken) is not None  # emit itself never fails
            tel.emit(allowed_record())  # same batch: only the broken record is lost
    stats = tel.stats()
    assert stats["spans_dropped"] == span_count(broken)
    assert stats["logs_dropped"] == 1
    assert stats["spans_exported"] == span_count(allowed_record())
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    names = [s["name"] for line in lines for rs in json.loads(line)["resourceSpans"]
             for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert "tools/call list_notes" in names and "tools/call read_note" not in names


@pytest.mark.anyio
async def test_console_exporter_writes_to_stderr_not_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with anyio.fail_after(10):
        async with open_telemetry(TelemetryConfig(exporter="console")) as tel:
            tel.emit(denied_record())
    out, err = capsys.readouterr()
    assert out == ""  # stdout may be the MCP stdio channel
    assert '"name": "tools/call read_note"' in err and "mtguard deny" in err


@pytest.mark.anyio
async def test_emit_after_close_is_a_counted_drop(tmp_path: Path) -> None:
    async with open_telemetry(file_config(tmp_path, webhook_url="http://127.0.0.1:9/")) as tel:
        pass
    tel.emit(denied_record())
    stats = tel.stats()
    assert stats["spans_dropped"] == span_count(denied_record())
    assert stats["logs_dropped"] == 1 and stats["webhook_dropped"] == 1


@pytest.mark.anyio
async def test_off_exports_nothing_and_returns_no_trace_id(tmp_path: Path) -> None:
    cfg = TelemetryConfig(exporter="off", traces_file=str(tmp_path / "t.jsonl"))
    async with open_telemetry(cfg) as tel:
        assert tel.emit(denied_record()) is None
    assert not (tmp_path / "t.jsonl").exists()
    assert tel.stats()["records"] == 1 and tel.stats()["spans_exported"] == 0


def test_exported_members() -> None:
    import mtguard_rt.telemetry as telemetry

    assert sorted(telemetry.__all__) == [
        "AuditLog", "Telemetry", "TelemetryConfig", "open_telemetry", "read_audit_log"
    ]
    assert all(getattr(telemetry, name) is not None for name in telemetry.__all__)


@pytest.mark.anyio
async def test_the_callers_exception_comes_out_unwrapped(tmp_path: Path) -> None:
    from mtguard_rt.errors import PolicyError

    with pytest.raises(PolicyError) as info:
        async with open_telemetry(file_config(tmp_path)) as tel:
            tel.emit(denied_record())
            raise PolicyError("guard.toml", 3, "bad")
    assert info.value.line == 3
    assert tel.stats()["spans_exported"] == span_count(denied_record())  # still flushed


@pytest.mark.anyio
async def test_outer_cancellation_still_flushes_within_the_bound(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        with anyio.move_on_after(0.05) as scope:
            async with open_telemetry(file_config(tmp_path)) as tel:
                tel.emit(denied_record())
                await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert tel.stats()["spans_exported"] == span_count(denied_record())
