"""journald output: native-protocol entries as a real systemd-journald stores them (read back
with journalctl), and a stopped journald counting every loss without slowing `emit`."""

from __future__ import annotations

import logging
import struct
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mtguard_rt.telemetry import TelemetryConfig, open_telemetry
from mtguard_rt.telemetry.alerts import alert_evidence, alert_payload
from mtguard_rt.telemetry.journald import journal_entry

from .daemons import journal_entries, run_journald
from .fixtures import allowed_record, denied_record

EMIT_BUDGET_S = 0.02  # as test_resilience

pytestmark = pytest.mark.root  # a mount namespace for the test's own journald


def test_an_entry_has_plain_and_length_prefixed_fields() -> None:
    record = denied_record("12")
    entry = journal_entry(
        {**alert_payload(record, ["deny"], None), "evidence": alert_evidence(record)},
        identifier="mtguard", facility=10,
    )
    assert b"PRIORITY=3\n" in entry and b"SYSLOG_FACILITY=10\n" in entry
    assert b"MTGUARD_RULE=secret-file-read,undeclared-egress\n" in entry
    assert b"MTGUARD_CALL_ID=12\n" in entry and b"MTGUARD_TRACE_ID" not in entry
    evidence = b"pid 102 open /home/mtguard/.ssh/id_rsa\npid 100 connect 127.0.0.1:8080"
    assert b"MTGUARD_EVIDENCE\n" + struct.pack("<Q", len(evidence)) + evidence + b"\n" in entry
    warn = journal_entry(alert_payload(allowed_record(), ["incomplete-tree"], None))
    assert b"PRIORITY=4\n" in warn and b"MTGUARD_RULE" not in warn


@pytest.mark.anyio
async def test_a_real_journald_stores_the_alert_with_its_fields(tmp_path: Path) -> None:
    with run_journald(tmp_path) as journald:
        cfg = TelemetryConfig(
            exporter="off", syslog_facility="authpriv",
            journald_socket=str(tmp_path / "run-systemd" / "journal" / "socket"),
        )
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                tel.emit(denied_record("61"))
        assert tel.stats()["journald_sent"] == 1
        (entry,) = journal_entries(journald.output, "MTGUARD_CALL_ID=61", 1)
    assert entry["PRIORITY"] == "3" and entry["SYSLOG_FACILITY"] == "10"
    assert entry["SYSLOG_IDENTIFIER"] == "mtguard" and entry["_TRANSPORT"] == "journal"
    assert entry["MESSAGE"].startswith("mtguard deny: tools/call read_note on notes")
    assert entry["MTGUARD_RULE"] == "secret-file-read,undeclared-egress"
    assert (entry["MTGUARD_SERVER"], entry["MTGUARD_TOOL"]) == ("notes", "read_note")
    assert entry["MTGUARD_EVIDENCE"].splitlines()[0] == "pid 102 open /home/mtguard/.ssh/id_rsa"


@pytest.mark.anyio
async def test_a_stopped_journald_counts_every_loss_and_never_slows_emit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with run_journald(tmp_path) as journald:
        journald.stop()
    cfg = TelemetryConfig(
        exporter="off", journald_socket=str(tmp_path / "run-systemd" / "journal" / "socket"),
        syslog_timeout=0.5, webhook_retries=1, webhook_backoff=0.05, webhook_queue_size=4,
        flush_timeout=1.0,
    )
    caplog.set_level(logging.WARNING, logger="mtguard_rt.telemetry.pipeline")
    slowest = 0.0
    t_open = time.perf_counter()
    with anyio.fail_after(15):
        async with open_telemetry(cfg) as tel:
            for i in range(20):
                t0 = time.perf_counter()
                tel.emit(denied_record(str(i)))
                slowest = max(slowest, time.perf_counter() - t0)
                await anyio.lowlevel.checkpoint()
    closed_after = time.perf_counter() - t_open
    stats = tel.stats()
    assert slowest < EMIT_BUDGET_S
    assert closed_after < cfg.flush_timeout + 3  # the exit drain is bounded too
    assert stats["journald_sent"] == 0
    assert stats["journald_failed"] + stats["journald_dropped"] == 20
    assert stats["journald_dropped"] >= 10
    assert "lost alerts (journald:" in caplog.text
