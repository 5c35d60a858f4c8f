"""Telemetry: behavior trees as OpenTelemetry traces, alerts (OTel logs, webhook, Alertmanager,
syslog, journald), the JSON Lines audit log, and its viewers (terminal tree, HTML report)."""

from .auditlog import AuditLog, read_audit_log
from .config import TelemetryConfig
from .pipeline import Telemetry, open_telemetry

__all__ = ["AuditLog", "Telemetry", "TelemetryConfig", "open_telemetry", "read_audit_log"]
