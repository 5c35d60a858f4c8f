"""Alerts: which records alert, the JSON a webhook receives, and the OTel log record.

A deny alerts by itself (when "deny" is in `alert_on`); an observe-mode violation, an
incomplete tree or a caller-given reason (e.g. "pinning-change") alert when enabled. A
free-form reason the config does not know always alerts: the caller chose to raise it.
The log record carries severity (ERROR for a deny, else WARN), rule ids and the trace id.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import (
    LoggerProvider,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext

from ..model import AuditRecord
from .config import ALERT_KINDS


def alert_kinds(record: AuditRecord, alert: str | None, alert_on: Sequence[str]) -> list[str]:
    """The alert kinds `record` raises, most severe first; empty when it raises none."""
    kinds: list[str] = []
    if record.decision == "deny" and "deny" in alert_on:
        kinds.append("deny")
    if (
        "observe-violation" in alert_on
        and record.decision == "allow"
        and any(v.mode == "observe" for v in record.violations)
    ):
        kinds.append("observe-violation")
    if "incomplete-tree" in alert_on and not record.tree_complete:
        kinds.append("incomplete-tree")
    if alert and (alert in alert_on or alert not in ALERT_KINDS) and alert not in kinds:
        kinds.append(alert)
    return kinds


def alert_payload(
    record: AuditRecord, kinds: Sequence[str], trace_id: str | None
) -> dict[str, Any]:
    """The webhook body: flat, stable keys, no argument content."""
    return {
        "kind": kinds[0],
        "kinds": list(kinds),
        "severity": "ERROR" if record.decision == "deny" else "WARN",
        "tool": record.tool,
        "server": record.server,
        "call_id": record.call_id,
        "request_id": record.request_id,
        "decision": record.decision,
        "phase": record.phase,
        "mode": record.mode,
        "rules": list(record.rules),
        "reasons": list(record.reasons),
        "tree_complete": record.tree_complete,
        "trace_id": trace_id,
        "ts": record.ts,
    }


def alert_evidence(record: AuditRecord, limit: int = 8) -> list[str]:
    """The first `limit` evidence lines of the record's violations, for a human summary."""
    lines = [e for v in record.violations for e in v.evidence]
    return lines[:limit] + ([f"... {len(lines) - limit} more"] if len(lines) > limit else [])


class _Collector(LogRecordProcessor):
    def __init__(self) -> None:
        self.records: list[ReadableLogRecord] = []

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        self.records.append(
            ReadableLogRecord(
                log_record=log_record.log_record,
                resource=log_record.resource or Resource.create({}),
                instrumentation_scope=log_record.instrumentation_scope,
                limits=log_record.limits,
            )
        )

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class AlertLogBuilder:
    """Builds alert log records with a private logger provider (no global state)."""

    def __init__(self, resource: Resource) -> None:
        self._collector = _Collector()
        provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        provider.add_log_record_processor(self._collector)
        self._logger = provider.get_logger("mtguard_rt.telemetry.alerts")

    def build(
        self, record: AuditRecord, kinds: Sequence[str], root: SpanContext | None
    ) -> list[ReadableLogRecord]:
        denied = record.decision == "deny"
        ctx = trace.set_span_in_context(NonRecordingSpan(root)) if root is not None else None
        rules = ", ".join(record.rules) or "no rule"
        body = f"mtguard {kinds[0]}: tools/call {record.tool} on {record.server} ({rules})"
        self._collector.records = []
        self._logger.emit(
            timestamp=int(record.ts * 1e9) if record.ts else time.time_ns(),
            context=ctx,
            severity_number=SeverityNumber.ERROR if denied else SeverityNumber.WARN,
            severity_text="ERROR" if denied else "WARN",
            body=body,
            event_name="mtguard.alert",
            attributes={
                "mtguard.alert.kind": kinds[0],
                "mtguard.alert.kinds": list(kinds),
                "mtguard.decision": record.decision,
                "mtguard.phase": record.phase or "",
                "mtguard.mode": record.mode,
                "mtguard.rules": list(record.rules),
                "mtguard.reasons": list(record.reasons),
                "mtguard.server": record.server,
                "mtguard.tree.complete": record.tree_complete,
                "gen_ai.tool.name": record.tool,
                "jsonrpc.request.id": record.request_id or record.call_id,
            },
        )
        out, self._collector.records = self._collector.records, []
        return out
