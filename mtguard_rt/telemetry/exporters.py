"""Exporter construction, and the default OTLP JSON Lines file exporters.

`create_exporters` maps the resolved kinds to SDK exporters: OTLP over HTTP or gRPC (endpoint,
headers and TLS from the config or the standard OTEL_EXPORTER_OTLP_* variables), console (stderr:
stdout may carry the MCP stdio protocol), the local file (one OTLP JSON export request per
line, the collector's `otlpjsonfile` format: hex ids, integer enums), or None for off.
Exporters are synchronous; the pipeline runs them in a worker thread.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import Message  # type: ignore[import-untyped,unused-ignore]
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    ConsoleLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter, SpanExportResult

from ..errors import TelemetryError
from .config import ExporterKind, TelemetryConfig, resolve_exporters

_ID_KEYS = frozenset(("traceId", "spanId", "parentSpanId"))


def otlp_json(message: Message) -> dict[str, Any]:
    """An OTLP protobuf message as OTLP/JSON (ids hex, not base64; enums as integers)."""
    data: dict[str, Any] = MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(data)
    return data


def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


class _JsonLinesFile:
    """Append-only, flushed per line, opened lazily (so an unused exporter creates nothing)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def write(self, data: dict[str, Any]) -> bool:
        line = json.dumps(data, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                if self._file is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._file = open(self.path, "a", encoding="utf-8")
                self._file.write(line)
                self._file.flush()
            except OSError:
                return False
        return True

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class OtlpJsonFileSpanExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self._out = _JsonLinesFile(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self._out.write(otlp_json(encode_spans(spans)))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._out.close()


class OtlpJsonFileLogExporter(LogRecordExporter):
    def __init__(self, path: str) -> None:
        self._out = _JsonLinesFile(path)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        ok = self._out.write(otlp_json(encode_logs(batch)))
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every line is flushed as it is written

    def shutdown(self) -> None:
        self._out.close()


def _signal_endpoint(config: TelemetryConfig, signal: str) -> str | None:
    if config.endpoint is None:
        return None  # the SDK exporter resolves OTEL_EXPORTER_OTLP_{SIGNAL_}ENDPOINT
    return f"{config.endpoint.rstrip('/')}/v1/{signal}"


def _span_exporter(kind: ExporterKind, config: TelemetryConfig) -> SpanExporter | None:
    if kind == "off":
        return None
    if kind == "console":
        return ConsoleSpanExporter(out=sys.stderr)
    if kind == "file":
        return OtlpJsonFileSpanExporter(config.traces_file)
    if kind == "otlp-grpc":  # OTLP exporters import lazily: grpc alone costs ~50 ms at start-up
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=config.endpoint, headers=config.headers or None, timeout=config.export_timeout
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=_signal_endpoint(config, "traces"),
        headers=config.headers or None,
        timeout=config.export_timeout,
    )


def _log_exporter(kind: ExporterKind, config: TelemetryConfig) -> LogRecordExporter | None:
    if kind == "off":
        return None
    if kind == "console":
        return ConsoleLogRecordExporter(out=sys.stderr)
    if kind == "file":
        return OtlpJsonFileLogExporter(config.logs_file)
    if kind == "otlp-grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter as GrpcLogExporter,
        )

        return GrpcLogExporter(
            endpoint=config.endpoint, headers=config.headers or None, timeout=config.export_timeout
        )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return OTLPLogExporter(
        endpoint=_signal_endpoint(config, "logs"),
        headers=config.headers or None,
        timeout=config.export_timeout,
    )


def create_exporters(
    config: TelemetryConfig,
) -> tuple[SpanExporter | None, LogRecordExporter | None]:
    """(span exporter, log exporter) for `config`; None where that signal is off."""
    traces, logs = resolve_exporters(config)
    try:
        return _span_exporter(traces, config), _log_exporter(logs, config)
    except (ValueError, OSError) as exc:
        raise TelemetryError(f"cannot create the {traces}/{logs} exporters: {exc}") from exc
