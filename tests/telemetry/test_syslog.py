"""Syslog output: RFC 5424 messages as a real rsyslog parses them (UDP and octet-counted TCP),
escaping, and a stopped daemon counting every loss without slowing `emit`."""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mtguard_rt.telemetry import TelemetryConfig, open_telemetry
from mtguard_rt.telemetry.alerts import alert_evidence, alert_payload
from mtguard_rt.telemetry.config import parse_syslog_address
from mtguard_rt.telemetry.syslog import FACILITIES, format_rfc5424, octet_counted

from .daemons import read_lines, run_rsyslog
from .fixtures import allowed_record, denied_record

EMIT_BUDGET_S = 0.02  # as test_resilience


def _payload(call_id: str = "7") -> dict[str, object]:
    record = denied_record(call_id)
    return {**alert_payload(record, ["deny"], "cd" * 16), "evidence": alert_evidence(record)}


def test_a_deny_is_an_rfc5424_message_with_structured_data() -> None:
    message = format_rfc5424(
        _payload(), facility=FACILITIES["auth"], hostname="guard host", procid=42
    ).decode()
    header = re.match(r"<(\d+)>1 (\S+) (\S+) (\S+) (\S+) (\S+) (\[.*?[^\\]\]) (.*)$", message)
    assert header is not None, message
    pri, stamp, host, app, procid, msgid, sd, msg = header.groups()
    assert int(pri) == 4 * 8 + 3  # auth.err
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
    assert (host, app, procid, msgid) == ("guardhost", "mtguard", "42", "deny")
    assert sd.startswith("[mtguard@32473 kind=\"deny\" rule=\"secret-file-read,undeclared-egress\"")
    assert 'call_id="7"' in sd and f'trace_id="{"cd" * 16}"' in sd
    assert msg.startswith("mtguard deny: tools/call read_note on notes (secret-file-read")
    assert "[evidence: pid 102 open /home/mtguard/.ssh/id_rsa" in msg


def test_sd_values_are_escaped_and_a_warning_has_warning_severity() -> None:
    payload = alert_payload(allowed_record(), ["incomplete-tree"], None)
    payload["tool"] = 'odd"tool]\\name\nwith newline'
    message = format_rfc5424(payload, facility=FACILITIES["local0"], hostname="h").decode()
    assert message.startswith(f"<{16 * 8 + 4}>1 ")  # local0.warning
    assert 'tool="odd\\"tool\\]\\\\name with newline"' in message
    assert "\n" not in message and "trace_id" not in message  # empty params left out
    assert octet_counted(b"<1>1 x") == b"6 <1>1 x"


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("udp://127.0.0.1:514", ("udp", "127.0.0.1", 514)), ("tcp://logs.example", ("tcp",
      "logs.example", 514)), ("tcp://[::1]:6514", ("tcp", "::1", 6514))],
)
def test_syslog_address_parses(address: str, parsed: tuple[str, str, int]) -> None:
    assert parse_syslog_address(address) == parsed


@pytest.mark.parametrize("bad", ["127.0.0.1:514", "http://h:1", "udp://h:0", "tcp://:514"])
def test_a_bad_syslog_address_fails_at_load(bad: str) -> None:
    with pytest.raises(ValueError, match="syslog_address"):
        TelemetryConfig(syslog_address=bad)
    with pytest.raises(ValueError, match="syslog_facility"):
        TelemetryConfig(syslog_facility="nope")


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_a_real_rsyslog_receives_and_parses_the_alerts(
    tmp_path: Path, transport: str
) -> None:
    with run_rsyslog(tmp_path) as (rsyslog, udp_port):
        port = udp_port if transport == "udp" else rsyslog.port
        cfg = TelemetryConfig(
            exporter="off", syslog_address=f"{transport}://127.0.0.1:{port}",
            syslog_facility="authpriv", alert_on=["deny", "incomplete-tree"],
        )
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                tel.emit(denied_record("31"))
                tel.emit(allowed_record("32"))  # incomplete tree: a warning
        assert tel.stats()["syslog_sent"] == 2
        lines = read_lines(rsyslog.output, 2)
    deny, warn = (line.split("|", 7) for line in lines)
    assert deny[0] == str(10 * 8 + 3) and warn[0] == str(10 * 8 + 4)  # authpriv.err, .warning
    assert deny[3:6] == ["mtguard", deny[4], "deny"] and deny[4].isdigit()
    when = datetime.fromtimestamp(denied_record().ts, UTC).isoformat(timespec="microseconds")
    assert deny[1] == when.replace("+00:00", "Z")  # rsyslog parsed our TIMESTAMP as sent
    assert 'server="notes"' in deny[6] and 'call_id="31"' in deny[6]
    assert 'rule="secret-file-read,undeclared-egress"' in deny[6]
    assert deny[7].lstrip().startswith("mtguard deny: tools/call read_note on notes")
    assert warn[5] == "incomplete-tree" and 'call_id="32"' in warn[6]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["udp", "tcp"])
async def test_a_stopped_rsyslog_counts_every_loss_and_never_slows_emit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """TCP: connect refused. UDP on loopback: the kernel's port unreachable, read back from
    the socket after each send, so no datagram to the dead daemon counts as sent."""
    with run_rsyslog(tmp_path) as (rsyslog, udp_port):
        port = rsyslog.port if transport == "tcp" else udp_port
        rsyslog.stop()
    cfg = TelemetryConfig(
        exporter="off", syslog_address=f"{transport}://127.0.0.1:{port}", syslog_timeout=0.5,
        webhook_retries=1, webhook_backoff=0.05, webhook_queue_size=4, flush_timeout=1.0,
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
    assert stats["syslog_sent"] == 0
    assert stats["syslog_failed"] + stats["syslog_dropped"] == 20
    assert stats["syslog_dropped"] >= 10
    assert "lost alerts (syslog:" in caplog.text



@pytest.mark.anyio
async def test_tcp_reconnects_to_a_restarted_rsyslog(tmp_path: Path) -> None:
    """The daemon stops: its alerts are counted failures, not silently written into the dead
    connection; once it is back, the next alert opens a new connection and arrives."""
    with run_rsyslog(tmp_path / "first") as (first, udp_port):
        ports = (first.port, udp_port)
        cfg = TelemetryConfig(
            exporter="off", syslog_address=f"tcp://127.0.0.1:{first.port}", syslog_timeout=1.0,
            webhook_retries=0,
        )
        with anyio.fail_after(40):
            async with open_telemetry(cfg) as tel:
                tel.emit(denied_record("1"))
                lines = await anyio.to_thread.run_sync(read_lines, first.output, 1)
                assert 'call_id="1"' in lines[0]
                first.stop()
                # the sender sees the closed connection before writing into it, reconnects,
                # is refused: each alert is a counted failure (no retries here), none vanishes
                for i in (2, 3):
                    tel.emit(denied_record(str(i)))
                    await _until(lambda n=i: sum(_outcomes(tel)) == n)
                assert _outcomes(tel) == (1, 2, 0)
                with run_rsyslog(tmp_path / "second", ports) as (second, _):
                    tel.emit(denied_record("4"))
                    lines = await anyio.to_thread.run_sync(read_lines, second.output, 1)
                    assert 'call_id="4"' in lines[0]
    assert _outcomes(tel) == (2, 2, 0)


def _outcomes(tel: object) -> tuple[int, int, int]:
    stats = tel.stats()  # type: ignore[attr-defined]
    return stats["syslog_sent"], stats["syslog_failed"], stats["syslog_dropped"]


async def _until(done: object) -> None:
    while not done():  # type: ignore[operator]  # noqa: ASYNC110 - a counter has no fd
        await anyio.sleep(0.02)
