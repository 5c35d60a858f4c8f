"""Alertmanager output: the v2 alerts it builds, its retries, and a real Alertmanager daemon
receiving, resolving and (when stopped) counting the loss of the guard's alerts."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from mtguard_rt.model import AuditRecord
from mtguard_rt.telemetry import TelemetryConfig, open_telemetry
from mtguard_rt.telemetry.alertmanager import ALERT_NAME, AlertmanagerSender, alertmanager_alerts
from mtguard_rt.telemetry.alerts import alert_evidence, alert_payload

from .daemons import get_alerts, run_alertmanager
from .fixtures import allowed_record, denied_record

EMIT_BUDGET_S = 0.02  # as test_resilience: one emit is µs of work, 20 ms for a noisy box


def _now(record: AuditRecord) -> AuditRecord:
    record.ts = time.time()  # Alertmanager drops alerts whose endsAt has already passed
    return record


def _payload(record: AuditRecord) -> dict[str, Any]:
    return {**alert_payload(record, ["deny"], "ab" * 16), "evidence": alert_evidence(record)}


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_one_alert_per_rule_with_labels_annotations_and_an_end() -> None:
    record = denied_record("41")
    alerts = alertmanager_alerts(_payload(record), resolve_after=120)
    assert [a["labels"]["rule"] for a in alerts] == ["secret-file-read", "undeclared-egress"]
    first = alerts[0]
    assert first["labels"] == {
        "alertname": ALERT_NAME, "kind": "deny", "server": "notes", "tool": "read_note",
        "decision": "deny", "severity": "critical", "rule": "secret-file-read",
    }
    notes = first["annotations"]
    assert notes["call_id"] == "41" and notes["trace_id"] == "ab" * 16
    assert "a process read an SSH private key" in notes["description"]
    assert "pid 102 open /home/mtguard/.ssh/id_rsa" in notes["evidence"]
    assert _ts(first["endsAt"]) - _ts(first["startsAt"]) == pytest.approx(120)
    assert _ts(first["startsAt"]) == pytest.approx(record.ts, abs=0.001)


def test_an_alert_without_rules_is_still_one_alert_and_long_text_is_clipped() -> None:
    payload = alert_payload(allowed_record(), ["incomplete-tree"], None)
    payload["reasons"] = ["x" * 5000]
    (alert,) = alertmanager_alerts(payload, resolve_after=60)
    assert alert["labels"]["rule"] == "none" and alert["labels"]["severity"] == "warning"
    assert len(alert["annotations"]["description"]) == 1024
    assert "trace_id" not in alert["annotations"]  # empty annotations are left out


@pytest.mark.anyio
async def test_retries_a_5xx_then_delivers_and_gives_up_on_a_4xx_at_once() -> None:
    seen: list[int] = []
    answers = [503, 200, 400]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v2/alerts"
        seen.append(len(json.loads(request.content)))
        return httpx.Response(answers.pop(0), text="no" if answers else "bad alert")

    sender = AlertmanagerSender(
        "http://am.test/", retries=3, backoff=0.01, transport=httpx.MockTransport(handler)
    )
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender.run)
            sender.submit(_payload(denied_record("1")))
            while sender.sent + sender.failed < 1:  # noqa: ASYNC110 - fake transport, no fd
                await anyio.sleep(0.01)
            sender.submit(_payload(denied_record("2")))
            sender.close()
    assert sender.abandon() == 0  # all delivered or given up; nothing left queued
    assert seen == [2, 2, 2]  # two rules: two alerts per request; 503 retried, 400 not
    assert (sender.sent, sender.failed, sender.dropped) == (1, 1, 0)


@pytest.mark.anyio
async def test_a_real_alertmanager_receives_the_deny_with_its_labels(tmp_path: Path) -> None:
    with run_alertmanager(tmp_path) as am:
        cfg = TelemetryConfig(
            exporter="off", alertmanager_url=f"http://127.0.0.1:{am.port}",
            alertmanager_resolve_after=600,
        )
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                tel.emit(_now(allowed_record("8")))  # allowed: no alert
                tel.emit(_now(denied_record("77")))
        assert tel.stats()["alertmanager_sent"] == 1
        alerts = get_alerts(am.port, tool="read_note")
    by_rule = {a["labels"]["rule"]: a for a in alerts}
    assert set(by_rule) == {"secret-file-read", "undeclared-egress"}
    got = by_rule["undeclared-egress"]
    assert got["labels"]["server"] == "notes" and got["labels"]["decision"] == "deny"
    assert got["labels"]["severity"] == "critical" and got["status"]["state"] == "active"
    assert got["annotations"]["call_id"] == "77"
    assert "pid 100 connect 127.0.0.1:8080" in got["annotations"]["evidence"]
    assert _ts(got["endsAt"]) - _ts(got["startsAt"]) == pytest.approx(600, abs=1)


@pytest.mark.anyio
async def test_a_rule_that_keeps_denying_is_one_alert_in_alertmanager(tmp_path: Path) -> None:
    """The call id is an annotation, not a label: a repeat refreshes the firing alert."""
    with run_alertmanager(tmp_path) as am:
        cfg = TelemetryConfig(exporter="off", alertmanager_url=f"http://127.0.0.1:{am.port}")
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                first = _now(denied_record("1"))
                tel.emit(first)
                while tel.stats()["alertmanager_sent"] < 1:  # noqa: ASYNC110 - a counter
                    await anyio.sleep(0.02)
                again = _now(denied_record("2"))
                tel.emit(again)
        assert tel.stats()["alertmanager_sent"] == 2
        alerts = get_alerts(am.port, tool="read_note")
    assert len(alerts) == 2  # one per rule, not one per call
    assert {a["annotations"]["call_id"] for a in alerts} == {"2"}  # the latest call
    assert all(_ts(a["startsAt"]) == pytest.approx(first.ts, abs=0.01) for a in alerts)
    assert all(_ts(a["endsAt"]) == pytest.approx(again.ts + 300, abs=0.01) for a in alerts)


@pytest.mark.anyio
async def test_a_real_alertmanager_resolves_the_alert_at_its_end(tmp_path: Path) -> None:
    with run_alertmanager(tmp_path) as am:
        cfg = TelemetryConfig(
            exporter="off", alertmanager_url=f"http://127.0.0.1:{am.port}",
            alertmanager_resolve_after=1.5,
        )
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                tel.emit(_now(denied_record("5")))
        assert tel.stats()["alertmanager_sent"] == 1
        firing = get_alerts(am.port, rule="secret-file-read")
        assert len(firing) == 1 and firing[0]["annotations"]["call_id"] == "5"
        await anyio.sleep(max(0.0, _ts(firing[0]["endsAt"]) - time.time()) + 0.5)  # past its end
        assert get_alerts(am.port, rule="secret-file-read") == []  # resolved: not listed


@pytest.mark.anyio
async def test_a_stopped_alertmanager_counts_every_loss_and_never_slows_emit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with run_alertmanager(tmp_path) as am:
        url = f"http://127.0.0.1:{am.port}"
        am.stop()
    cfg = TelemetryConfig(
        exporter="off", alertmanager_url=url, alertmanager_timeout=0.5, webhook_retries=1,
        webhook_backoff=0.05, webhook_queue_size=4, flush_timeout=1.0,
    )
    slowest = 0.0
    caplog.set_level(logging.WARNING, logger="mtguard_rt.telemetry.pipeline")
    t_open = time.perf_counter()
    with anyio.fail_after(15):
        async with open_telemetry(cfg) as tel:
            for i in range(20):
                t0 = time.perf_counter()
                tel.emit(_now(denied_record(str(i))))
                slowest = max(slowest, time.perf_counter() - t0)
                await anyio.lowlevel.checkpoint()
    closed_after = time.perf_counter() - t_open
    stats = tel.stats()
    assert slowest < EMIT_BUDGET_S
    assert closed_after < cfg.flush_timeout + 3  # the exit drain is bounded too
    assert stats["alertmanager_sent"] == 0
    assert stats["alertmanager_failed"] + stats["alertmanager_dropped"] == 20
    assert stats["alertmanager_dropped"] >= 10  # a 4-deep queue cannot hold 20
    assert "lost alerts (alertmanager:" in caplog.text


def test_lost_alerts_are_reported_on_stderr_at_exit_without_logging_setup() -> None:
    """The guard configures no logging: Python's last-resort handler must still show it."""
    program = (
        "import anyio\n"
        "from mtguard_rt.telemetry import TelemetryConfig, open_telemetry\n"
        "from tests.telemetry.fixtures import denied_record\n"
        "async def main():\n"
        "    cfg = TelemetryConfig(exporter='off', alertmanager_url='http://127.0.0.1:9',\n"
        "                          webhook_retries=0, alertmanager_timeout=0.5)\n"
        "    async with open_telemetry(cfg) as tel:\n"
        "        tel.emit(denied_record())\n"
        "anyio.run(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30,
        cwd=Path(__file__).resolve().parents[2], check=True,
    )
    assert done.stdout == ""  # stdout may be the MCP stdio channel
    assert "mtguard telemetry lost alerts (alertmanager: 1 failed, 0 dropped)" in done.stderr
