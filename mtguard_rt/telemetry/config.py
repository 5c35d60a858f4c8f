"""Telemetry settings: the `[telemetry]` table of the guard's config, and the exporter choice.

`TelemetryConfig` forbids unknown fields (typos fail at load). Unset choices fall back to
the standard OTEL_* environment variables (`OTEL_TRACES_EXPORTER`, `OTEL_LOGS_EXPORTER`,
`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_ENDPOINT`), then to the local OTLP JSON
file, so nothing needs a collector to start. An unsupported choice raises `TelemetryError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

import msgspec

from ..errors import TelemetryError
from ..paths import default_alerts_file, default_traces_file
from .syslog import FACILITIES as SYSLOG_FACILITIES

ExporterKind = Literal["file", "otlp-http", "otlp-grpc", "console", "off"]
AlertKind = Literal["deny", "observe-violation", "incomplete-tree", "pinning-change"]
ALERT_KINDS: frozenset[str] = frozenset(
    ("deny", "observe-violation", "incomplete-tree", "pinning-change")
)


class TelemetryConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where spans, alert logs and webhooks go. Every field has a working default."""

    exporter: ExporterKind | None = None  # None: from OTEL_TRACES_EXPORTER, else "file"
    logs_exporter: ExporterKind | None = None  # None: OTEL_LOGS_EXPORTER, else as `exporter`
    endpoint: str | None = None  # OTLP base URL; None: OTEL_EXPORTER_OTLP_* or :4318/:4317
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    # OTLP JSON, one export request per line; default: the per-user state dir (paths.py)
    traces_file: str = msgspec.field(default_factory=default_traces_file)
    logs_file: str = msgspec.field(default_factory=default_alerts_file)
    service_name: str = "mtguard"
    include_content: bool = False  # tool arguments/result on spans (GenAI opt-in content)
    export_timeout: float = 5.0  # one export request, retries included (s)
    flush_timeout: float = 5.0  # shielded drain on close before giving up (s)
    queue_size: int = 512  # records waiting for export; beyond this they are counted drops
    max_batch: int = 64  # records per export request
    max_events_per_span: int = 1024  # file/net/dns events on one process span
    alert_on: list[AlertKind] = msgspec.field(default_factory=lambda: ["deny", "pinning-change"])
    webhook_url: str | None = None  # POST one JSON object per alert
    webhook_headers: dict[str, str] = msgspec.field(default_factory=dict)
    webhook_timeout: float = 5.0  # one POST (s)
    webhook_retries: int = 3  # further attempts after the first, with exponential backoff
    webhook_backoff: float = 0.5  # first retry delay (s); doubles each retry
    webhook_queue_size: int = 256  # retries, backoff and queue size apply to every alert output
    alertmanager_url: str | None = None  # Alertmanager base URL; alerts POSTed to /api/v2/alerts
    alertmanager_headers: dict[str, str] = msgspec.field(default_factory=dict)
    alertmanager_timeout: float = 5.0  # one POST (s)
    alertmanager_resolve_after: float = 300.0  # endsAt = startsAt + this (s): alerts resolve
    syslog_address: str | None = None  # "udp://127.0.0.1:514" or "tcp://host:port" (RFC 5424)
    syslog_facility: str = "local0"  # kern, user, daemon, auth, authpriv, audit, local0..7
    syslog_app_name: str = "mtguard"
    syslog_timeout: float = 5.0  # one connect + send (s)
    # journald's native socket, e.g. "/run/systemd/journal/socket"; uses syslog_app_name and
    # syslog_facility as SYSLOG_IDENTIFIER and SYSLOG_FACILITY
    journald_socket: str | None = None

    def __post_init__(self) -> None:
        for name in ("export_timeout", "flush_timeout", "webhook_timeout",
                     "alertmanager_timeout", "alertmanager_resolve_after", "syslog_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("queue_size", "max_batch", "max_events_per_span", "webhook_queue_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.webhook_retries < 0 or self.webhook_backoff < 0:
            raise ValueError("webhook_retries and webhook_backoff must be >= 0")
        if self.syslog_address is not None:
            parse_syslog_address(self.syslog_address)
        if self.syslog_facility not in SYSLOG_FACILITIES:
            raise ValueError(f"syslog_facility must be one of {', '.join(SYSLOG_FACILITIES)}")


def parse_syslog_address(address: str) -> tuple[Literal["udp", "tcp"], str, int]:
    """("udp"|"tcp", host, port) from "udp://host:port" or "tcp://host:port" (default 514)."""
    scheme, sep, rest = address.partition("://")
    host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "514")
    host = host.strip("[]")
    if not sep or scheme not in ("udp", "tcp") or not host or not port.isdigit():
        raise ValueError(f"syslog_address {address!r}: use udp://host:port or tcp://host:port")
    if not 0 < int(port) < 65536:
        raise ValueError(f"syslog_address {address!r}: port out of range")
    return ("udp" if scheme == "udp" else "tcp"), host, int(port)


def _from_env(var: str, env: Mapping[str, str]) -> ExporterKind | None:
    value = env.get(var, "").strip().lower()
    if not value:
        return None
    first = value.split(",")[0].strip()
    if first == "none":
        return "off"
    if first == "console":
        return "console"
    if first == "otlp":
        return _otlp_kind(env)
    raise TelemetryError(f"{var}={value!r} is not supported (use otlp, console or none)")


def _otlp_kind(env: Mapping[str, str]) -> ExporterKind:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    ) or "http/protobuf"
    kind = {"http/protobuf": "otlp-http", "grpc": "otlp-grpc"}.get(protocol.strip().lower())
    if kind is None:
        raise TelemetryError(
            f"OTLP protocol {protocol!r} is not supported; use http/protobuf or grpc "
            "(OTEL_EXPORTER_OTLP_PROTOCOL) or the file/console exporters"
        )
    return "otlp-http" if kind == "otlp-http" else "otlp-grpc"


def resolve_exporters(
    config: TelemetryConfig, env: Mapping[str, str] | None = None
) -> tuple[ExporterKind, ExporterKind]:
    """(traces, logs) exporter kinds: the config first, then OTEL_* variables, then "file"."""
    env = os.environ if env is None else env
    traces = config.exporter or _from_env("OTEL_TRACES_EXPORTER", env)
    if traces is None:
        endpoint_set = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
        traces = _otlp_kind(env) if endpoint_set else "file"
    logs = config.logs_exporter or _from_env("OTEL_LOGS_EXPORTER", env) or traces
    return traces, logs
