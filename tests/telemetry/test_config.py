"""Exporter choice (config, then OTEL_* variables, then the file) and the file exporter."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from mtguard_rt.errors import TelemetryError
from mtguard_rt.telemetry import TelemetryConfig, open_telemetry
from mtguard_rt.telemetry.config import resolve_exporters

from .fixtures import denied_record


def test_unknown_fields_fail() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.toml.decode(b'exporter = "file"\nexpoter = "x"\n', type=TelemetryConfig)
    with pytest.raises(msgspec.ValidationError):
        msgspec.toml.decode(b'exporter = "zipkin"\n', type=TelemetryConfig)
    with pytest.raises(msgspec.ValidationError, match="queue_size"):
        msgspec.toml.decode(b"queue_size = 0\n", type=TelemetryConfig)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("file", "file")),
        ({"OTEL_TRACES_EXPORTER": "none"}, ("off", "off")),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_LOGS_EXPORTER": "none"}, ("console", "off")),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ("otlp-http", "otlp-http")),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp-http", "otlp-http")),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            ("otlp-grpc", "otlp-grpc"),
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            ("otlp-http", "otlp-http"),
        ),
    ],
)
def test_exporter_from_environment(env: dict[str, str], expected: tuple[str, str]) -> None:
    assert resolve_exporters(TelemetryConfig(), env) == expected


def test_config_wins_over_environment() -> None:
    env = {"OTEL_TRACES_EXPORTER": "otlp"}
    assert resolve_exporters(TelemetryConfig(exporter="off"), env) == ("off", "off")


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "zipkin"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
    ],
)
def test_unsupported_choice_is_a_clear_error(env: dict[str, str]) -> None:
    with pytest.raises(TelemetryError, match="not supported"):
        resolve_exporters(TelemetryConfig(), env)


@pytest.mark.anyio
async def test_default_file_exporter_writes_otlp_json(tmp_path: Path) -> None:
    cfg = TelemetryConfig(
        exporter="file", traces_file=str(tmp_path / "t.jsonl"), logs_file=str(tmp_path / "a.jsonl")
    )
    with anyio.fail_after(10):
        async with open_telemetry(cfg) as tel:
            trace_id = tel.emit(denied_record())
    [line] = (tmp_path / "t.jsonl").read_text().splitlines()
    request = json.loads(line)
    spans = [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert len(spans) == 7 and {s["traceId"] for s in spans} == {trace_id}
    root = next(s for s in spans if s["name"] == "tools/call read_note")
    assert root["kind"] == 2 and len(root["spanId"]) == 16  # OTLP JSON: int enums, hex ids
    children = [s for s in spans if s.get("parentSpanId") == root["spanId"]]
    assert sorted(s["name"] for s in children) == ["execution", "post-verification", "pre-audit"]
    resource = request["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "mtguard"}} in resource
    # it is valid OTLP/JSON: with the ids back in protobuf's base64 it parses as the request
    parsed = json_format.Parse(json.dumps(_ids_to_base64(request)), ExportTraceServiceRequest())
    assert len(parsed.resource_spans[0].scope_spans[0].spans) == 7
    [alert] = (tmp_path / "a.jsonl").read_text().splitlines()
    log = json.loads(alert)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert log["traceId"] == trace_id and log["severityText"] == "ERROR"
    assert tel.stats()["spans_exported"] == 7


def _ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") else _ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_ids_to_base64(v) for v in node]
    return node
