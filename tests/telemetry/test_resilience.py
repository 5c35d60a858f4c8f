"""An unreachable or slow exporter/webhook never delays `emit`; every loss is counted."""

from __future__ import annotations

import socket
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from mtguard_rt.telemetry import TelemetryConfig, open_telemetry
from mtguard_rt.telemetry.spans import span_count

from .fixtures import allowed_record, denied_record
from .receiver import run_receiver

EMIT_BUDGET_S = 0.02  # one emit is a few µs of work; 20 ms leaves room for a noisy 2-core CI box


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def emit_many(tel: Any, n: int) -> tuple[float, int]:
    """Emit n records; return the slowest emit (s) and the spans they represent."""
    slowest, spans = 0.0, 0
    for i in range(n):
        record = denied_record(str(i)) if i % 2 else allowed_record(str(i))
        t0 = time.perf_counter()
        tel.emit(record)
        slowest = max(slowest, time.perf_counter() - t0)
        spans += span_count(record)
        await anyio.lowlevel.checkpoint()  # let the export task run, as a live guard would
    return slowest, spans


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["otlp-http", "otlp-grpc"])
async def test_unreachable_exporter_never_delays_emit_and_counts_drops(kind: str) -> None:
    cfg = TelemetryConfig(
        exporter=kind, endpoint=f"http://127.0.0.1:{closed_port()}",  # type: ignore[arg-type]
        export_timeout=0.5, flush_timeout=1.0, queue_size=4,
    )
    with anyio.fail_after(15):
        t0 = time.perf_counter()
        async with open_telemetry(cfg) as tel:
            slowest, spans = await emit_many(tel, 30)
        closed_after = time.perf_counter() - t0
    stats = tel.stats()
    assert slowest < EMIT_BUDGET_S
    assert stats["spans_exported"] == 0
    assert stats["spans_dropped"] == spans  # nothing vanished silently
    assert stats["logs_dropped"] == 15  # one alert per deny
    assert closed_after < cfg.flush_timeout + cfg.export_timeout + 2


@pytest.mark.anyio
async def test_slow_exporter_is_abandoned_within_the_flush_bound() -> None:
    with run_receiver() as rx:
        rx.delay = 30.0  # released when the receiver closes
        cfg = TelemetryConfig(
            exporter="otlp-http", endpoint=rx.url, export_timeout=10.0, flush_timeout=0.5,
            queue_size=8, alert_on=[],
        )
        with anyio.fail_after(15):
            t0 = time.perf_counter()
            async with open_telemetry(cfg) as tel:
                slowest, spans = await emit_many(tel, 20)
            closed_after = time.perf_counter() - t0
    stats = tel.stats()
    assert slowest < EMIT_BUDGET_S
    assert closed_after < 3.0  # the 10 s export was abandoned after the 0.5 s flush bound
    assert rx.requests >= 1  # it really was stuck in an export
    assert stats["spans_exported"] + stats["spans_dropped"] == spans
    assert stats["spans_exported"] == 0


@pytest.mark.anyio
async def test_webhook_posts_alerts_as_json() -> None:
    with run_receiver() as rx:
        cfg = TelemetryConfig(exporter="off", webhook_url=f"{rx.url}/alerts")
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                assert tel.emit(denied_record()) is None  # tracing off: no trace id
                tel.emit(allowed_record())  # allowed + complete-tree alerts off: no POST
    assert tel.stats()["webhook_sent"] == 1
    [alert] = rx.posts
    assert alert["kind"] == "deny" and alert["severity"] == "ERROR"
    assert alert["rules"] == ["secret-file-read", "undeclared-egress"]
    assert alert["tool"] == "read_note" and alert["call_id"] == "7"
    assert "arguments" not in alert


@pytest.mark.anyio
async def test_webhook_retries_with_backoff_then_counts_a_failure() -> None:
    with run_receiver() as rx:
        rx.status = 503
        cfg = TelemetryConfig(
            exporter="off", webhook_url=f"{rx.url}/alerts", webhook_retries=2,
            webhook_backoff=0.05,
        )
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                tel.emit(denied_record())
    assert rx.requests == 3  # first attempt + 2 retries
    stats = tel.stats()
    assert (stats["webhook_sent"], stats["webhook_failed"]) == (0, 1)


@pytest.mark.anyio
async def test_slow_webhook_queue_is_bounded_and_drops_are_counted() -> None:
    with run_receiver() as rx:
        rx.delay = 30.0
        cfg = TelemetryConfig(
            exporter="off", webhook_url=f"{rx.url}/alerts", webhook_timeout=10.0,
            webhook_queue_size=2, flush_timeout=0.5,
        )
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                slowest = 0.0
                for i in range(10):
                    t0 = time.perf_counter()
                    tel.emit(denied_record(str(i)))
                    slowest = max(slowest, time.perf_counter() - t0)
                    await anyio.lowlevel.checkpoint()
    stats = tel.stats()
    assert slowest < EMIT_BUDGET_S
    assert stats["webhook_sent"] == 0
    assert stats["webhook_dropped"] + stats["webhook_failed"] == 10
    assert stats["webhook_dropped"] >= 7  # only the queue (2) + one in flight could wait


def test_unreachable_exporter_under_a_sync_caller() -> None:
    """The CLI runs on trio via `trio.run`; the pipeline must close cleanly there too."""
    cfg = TelemetryConfig(
        exporter="otlp-http", endpoint=f"http://127.0.0.1:{closed_port()}",
        export_timeout=0.3, flush_timeout=0.5,
    )

    async def main() -> dict[str, int]:
        async with open_telemetry(cfg) as tel:
            tel.emit(denied_record())
        return tel.stats()

    stats = anyio.run(main, backend="trio")
    assert stats["spans_dropped"] == span_count(denied_record())
