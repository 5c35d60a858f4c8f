"""`open_telemetry`: the guard's telemetry pipeline, owned by one task group.

`Telemetry.emit` is sync and O(1): it picks the trace id, queues the record for the export
task and an alert for the webhook, and returns; a full queue is a counted drop, never a
wait. The export task builds spans and alert logs after the call and exports whatever has
queued meanwhile as one batch, in a worker thread (the SDK exporters block). On exit the
queues are drained within `flush_timeout` (shielded); what is left is counted as dropped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, format_trace_id

from ..model import AuditRecord
from .alertmanager import AlertmanagerSender
from .alerts import AlertLogBuilder, alert_evidence, alert_kinds, alert_payload
from .config import TelemetryConfig, parse_syslog_address
from .exporters import create_exporters
from .journald import JournaldSender
from .outbox import AlertOutbox
from .spans import SpanBuilder, new_trace_id, parse_traceparent, span_count
from .syslog import SyslogSender
from .webhook import WebhookSender

log = logging.getLogger(__name__)
_Job = tuple[AuditRecord, int, SpanContext | None, list[str]]


class Telemetry:
    """Handed out by `open_telemetry`; `emit` and `stats` are the whole public surface."""

    def __init__(
        self,
        config: TelemetryConfig,
        span_exporter: SpanExporter | None,
        log_exporter: LogRecordExporter | None,
        webhook: WebhookSender | None,
        outputs: Sequence[AlertOutbox] = (),
    ) -> None:
        self.config = config
        self._spans_out = span_exporter
        self._logs_out = log_exporter
        self._webhook = webhook
        self._outputs = tuple(outputs)  # Alertmanager, syslog: each with its own queue
        resource = Resource.create({SERVICE_NAME: config.service_name})
        self._spans = SpanBuilder(
            resource, include_content=config.include_content, max_events=config.max_events_per_span
        )
        self._alerts = AlertLogBuilder(resource)
        self._send, self._recv = anyio.create_memory_object_stream[_Job](config.queue_size)
        self._counts = dict.fromkeys(
            ("records", "spans_exported", "spans_dropped", "logs_exported", "logs_dropped",
             "export_failures", "alerts"), 0,
        )

    def emit(
        self, record: AuditRecord, traceparent: str | None = None, alert: str | None = None
    ) -> str | None:
        """Queue `record` for export; returns its trace id (None when tracing is off)."""
        self._counts["records"] += 1
        parent = parse_traceparent(traceparent)
        if parent is not None:
            trace_id = parent.trace_id
        elif record.trace_id and _valid_hex_id(record.trace_id):
            trace_id = int(record.trace_id, 16)
        else:
            trace_id = new_trace_id()
        kinds = alert_kinds(record, alert, self.config.alert_on)
        hex_id = format_trace_id(trace_id)
        if kinds:
            self._counts["alerts"] += 1
            payload = alert_payload(record, kinds, hex_id)
            if self._webhook is not None:
                self._webhook.submit(payload)
            if self._outputs:
                rich = {**payload, "evidence": alert_evidence(record)}
                for output in self._outputs:
                    output.submit(rich)
        if self._spans_out is not None or (kinds and self._logs_out is not None):
            try:
                self._send.send_nowait((record, trace_id, parent, kinds))
            except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._drop(record, kinds)
        return hex_id if self._spans_out is not None else None

    def stats(self) -> dict[str, int]:
        counts = dict(self._counts)
        webhook = self._webhook
        counts["webhook_sent"] = webhook.sent if webhook else 0
        counts["webhook_failed"] = webhook.failed if webhook else 0
        counts["webhook_dropped"] = webhook.dropped if webhook else 0
        for output in self._outputs:
            counts[f"{output.name}_sent"] = output.sent
            counts[f"{output.name}_failed"] = output.failed
            counts[f"{output.name}_dropped"] = output.dropped
        return counts

    def _report_losses(self) -> None:
        """At exit: one warning naming every alert output that lost alerts (never silent)."""
        lost = [
            f"{name}: {failed} failed, {dropped} dropped"
            for name, failed, dropped in (
                *(("webhook", w.failed, w.dropped) for w in (self._webhook,) if w is not None),
                *((o.name, o.failed, o.dropped) for o in self._outputs),
            )
            if failed or dropped
        ]
        if lost:
            log.warning("mtguard telemetry lost alerts (%s)", "; ".join(lost))

    def _drop(self, record: AuditRecord, kinds: Sequence[str]) -> None:
        if self._spans_out is not None:
            self._counts["spans_dropped"] += span_count(record)
        if kinds and self._logs_out is not None:
            self._counts["logs_dropped"] += 1

    async def _run_exports(self) -> None:
        """Export until `_send` is closed and the queue is empty; a batch is what queued."""
        async with self._recv.clone() as recv:
            async for job in recv:
                jobs = [job]
                while len(jobs) < self.config.max_batch:
                    try:
                        jobs.append(recv.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await self._export(jobs)

    async def _export(self, jobs: Sequence[_Job]) -> None:
        """Build and export one batch in a worker thread, so a big tree never stalls the loop."""
        pending = {
            "spans": sum(span_count(r) for r, *_ in jobs) if self._spans_out is not None else 0,
            "logs": sum(1 for *_, k in jobs if k) if self._logs_out is not None else 0,
        }
        try:
            counts = await anyio.to_thread.run_sync(self._process, jobs, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():  # cancelled at shutdown: in flight is lost
            for signal, n in pending.items():
                self._counts[f"{signal}_dropped"] += n
            raise
        for key, n in counts.items():
            self._counts[key] += n

    def _process(self, jobs: Sequence[_Job]) -> dict[str, int]:
        """Worker thread: spans and alert logs for `jobs`, exported; returns counter deltas."""
        counts = dict.fromkeys(self._counts, 0)
        spans: list[ReadableSpan] = []
        logs: list[ReadableLogRecord] = []
        for record, trace_id, parent, kinds in jobs:
            try:
                built = self._spans.build(record, trace_id, parent)
                root = next((s.context for s in built if s.kind is SpanKind.SERVER), None)
                alerts = self._alerts.build(record, kinds, root) if kinds else []
            except Exception:  # a record the builder cannot handle must not end telemetry
                log.exception("cannot build spans for call %s", record.call_id)
                counts["spans_dropped"] += span_count(record) if self._spans_out else 0
                counts["logs_dropped"] += 1 if kinds and self._logs_out else 0
                continue
            spans.extend(built)
            logs.extend(alerts)
        if spans and self._spans_out is not None:
            ok = _call(self._spans_out.export, spans) is SpanExportResult.SUCCESS
            counts["spans_exported" if ok else "spans_dropped"] += len(spans)
            counts["export_failures"] += 0 if ok else 1
        if logs and self._logs_out is not None:
            ok = _call(self._logs_out.export, logs) is LogRecordExportResult.SUCCESS
            counts["logs_exported" if ok else "logs_dropped"] += len(logs)
            counts["export_failures"] += 0 if ok else 1
        return counts

    def _abandon(self) -> None:
        """After a timed-out flush: count what is still queued as dropped."""
        while True:
            try:
                record, _, _, kinds = self._recv.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            self._drop(record, kinds)
        self._recv.close()

    def _shutdown_exporters(self) -> None:
        for exporter in (self._spans_out, self._logs_out):
            if exporter is not None:
                try:
                    exporter.shutdown()
                except Exception:
                    log.exception("telemetry exporter shutdown raised")


def _call(export: Callable[[Any], Any], items: Sequence[Any]) -> Any:
    try:
        return export(items)
    except Exception:  # an exporter bug must not end telemetry for the process
        log.exception("telemetry exporter raised")
        return None


def _valid_hex_id(value: str) -> bool:
    try:
        return len(value) == 32 and int(value, 16) != 0
    except ValueError:
        return False


@asynccontextmanager
async def open_telemetry(config: TelemetryConfig | None = None) -> AsyncIterator[Telemetry]:
    """Run the telemetry pipeline for the duration of the block (asyncio or trio)."""
    config = config or TelemetryConfig()
    span_exporter, log_exporter = create_exporters(config)
    webhook = None
    if config.webhook_url and config.alert_on:
        webhook = WebhookSender(
            config.webhook_url, headers=config.webhook_headers, timeout=config.webhook_timeout,
            retries=config.webhook_retries, backoff=config.webhook_backoff,
            queue_size=config.webhook_queue_size,
        )
    outputs = create_alert_outputs(config)
    tel = Telemetry(config, span_exporter, log_exporter, webhook, outputs)
    exports_done, webhook_done = anyio.Event(), anyio.Event()
    outputs_done = [anyio.Event() for _ in outputs]
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_done, tel._run_exports, exports_done)
            if webhook is not None:
                tg.start_soon(_until_done, webhook.run, webhook_done)
            else:
                webhook_done.set()
            for output, done in zip(outputs, outputs_done, strict=True):
                tg.start_soon(_until_done, output.run, done)
            try:
                yield tel
            finally:
                tel._send.close()
                if webhook is not None:
                    webhook.close()
                for output in outputs:
                    output.close()
                with anyio.CancelScope(shield=True), anyio.move_on_after(config.flush_timeout):
                    for done in (exports_done, webhook_done, *outputs_done):
                        await done.wait()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        _reraise_alone(group)
    finally:
        tel._abandon()
        if webhook is not None:
            webhook.abandon()
        for output in outputs:
            output.abandon()
        tel._shutdown_exporters()
        tel._report_losses()


def create_alert_outputs(config: TelemetryConfig) -> list[AlertOutbox]:
    """The Alertmanager and syslog outputs `config` names (none unless it names them)."""
    if not config.alert_on:
        return []
    shared = {
        "retries": config.webhook_retries, "backoff": config.webhook_backoff,
        "queue_size": config.webhook_queue_size,
    }
    outputs: list[AlertOutbox] = []
    if config.alertmanager_url:
        outputs.append(AlertmanagerSender(
            config.alertmanager_url, headers=config.alertmanager_headers,
            timeout=config.alertmanager_timeout,
            resolve_after=config.alertmanager_resolve_after, **shared,  # type: ignore[arg-type]
        ))
    if config.syslog_address:
        transport, host, port = parse_syslog_address(config.syslog_address)
        outputs.append(SyslogSender(
            host, port, transport=transport, facility=config.syslog_facility,
            app_name=config.syslog_app_name, timeout=config.syslog_timeout,
            **shared,  # type: ignore[arg-type]
        ))
    if config.journald_socket:
        outputs.append(JournaldSender(
            config.journald_socket, identifier=config.syslog_app_name,
            facility=config.syslog_facility, timeout=config.syslog_timeout,
            **shared,  # type: ignore[arg-type]
        ))
    return outputs


async def _until_done(run: Callable[[], Awaitable[None]], done: anyio.Event) -> None:
    try:
        await run()
    finally:
        done.set()


def _reraise_alone(group: BaseExceptionGroup[BaseException]) -> None:
    """Re-raise the caller's own exception unwrapped (our tasks never raise), so a
    `GuardError` from the body of `open_telemetry` reaches the caller's `except` as itself."""
    if len(group.exceptions) != 1:
        raise group
    exc = group.exceptions[0]
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context  # hide the task group's wrapper from the traceback
        del exc
