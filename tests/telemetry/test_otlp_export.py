"""Spans and alert logs reach a real OTLP/HTTP receiver with the tree's structure."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from mtguard_rt.telemetry import TelemetryConfig, open_telemetry

from .fixtures import OFFSET, SSH_KEY, allowed_record, denied_record, pre_denied_record
from .receiver import Receiver, run_grpc_receiver, run_receiver

AGENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"


def attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        v = kv.value
        kind = v.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [getattr(x, x.WhichOneof("value")) for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, kind)
    return out


def config(rx: Receiver, **kw: Any) -> TelemetryConfig:
    return TelemetryConfig(exporter="otlp-http", endpoint=rx.url, export_timeout=5.0, **kw)


@pytest.mark.anyio
async def test_denied_call_spans_mirror_the_tree() -> None:
    record = denied_record()
    tree = record.tree
    assert tree is not None
    with run_receiver() as rx:
        with anyio.fail_after(15):
            async with open_telemetry(config(rx)) as tel:
                trace_id = tel.emit(record)
        stats = tel.stats()
    spans = rx.spans()
    assert len(spans) == 4 + len(tree.processes) == stats["spans_exported"]
    assert stats["spans_dropped"] == 0
    by_name = {s.name: s for s in spans}
    assert trace_id is not None and all(s.trace_id.hex() == trace_id for s in spans)

    root = by_name["tools/call read_note"]
    assert root.kind == Span.SPAN_KIND_SERVER and root.parent_span_id == b""
    ra = attrs(root.attributes)
    assert ra["mcp.method.name"] == "tools/call"
    assert ra["gen_ai.operation.name"] == "execute_tool"
    assert ra["gen_ai.tool.name"] == "read_note"
    assert ra["jsonrpc.request.id"] == "7"  # no host request id recorded: the call id
    assert ra["mtguard.decision"] == "deny" and ra["mtguard.phase"] == "post"
    assert ra["mtguard.rules"] == ["secret-file-read", "undeclared-egress"]
    assert ra["mtguard.timings.total_ms"] == pytest.approx(11.2)
    assert "gen_ai.tool.call.arguments" not in ra and "mtguard.task" not in ra  # opt-in
    assert root.status.code == 2  # ERROR

    stages = {n: by_name[n] for n in ("pre-audit", "execution", "post-verification")}
    assert all(s.parent_span_id == root.span_id for s in stages.values())
    assert [e.name for e in stages["post-verification"].events] == ["mtguard.violation"] * 2
    ex = stages["execution"]
    assert ex.start_time_unix_nano == tree.window_start_ns + OFFSET
    assert ex.end_time_unix_nano == tree.window_end_ns + OFFSET
    assert [e.name for e in ex.events] == ["dns.query"]  # the unattributed query

    procs = {attrs(s.attributes)["process.pid"]: s for s in spans if s.name.startswith("process ")}
    assert set(procs) == {p.pid for p in tree.processes}
    span_of_key = {p.key: procs[p.pid] for p in tree.processes}
    for p in tree.processes:
        span = span_of_key[p.key]
        parent = span_of_key[p.parent].span_id if p.parent else ex.span_id
        assert span.parent_span_id == parent, p.key
        assert len(span.events) == len(p.files) + len(p.net) + len(p.dns) + len(p.execs)
        pa = attrs(span.attributes)
        assert pa["process.executable.path"] == p.exe
        assert pa["process.command_line"] == " ".join(p.argv)
        if p.exit_code is not None:
            assert pa["process.exit.code"] == p.exit_code
            assert span.end_time_unix_nano == p.end_ns + OFFSET  # type: ignore[operator]
    cat = procs[102]
    assert cat.start_time_unix_nano == tree.processes[2].start_ns + OFFSET
    opens = [attrs(e.attributes)["file.path"] for e in cat.events if e.name == "file.open"]
    assert opens == ["/etc/ld.so.cache", SSH_KEY]
    server_events = {e.name: attrs(e.attributes) for e in procs[100].events}
    assert server_events["network.connect"]["network.peer.address"] == "127.0.0.1"
    assert server_events["network.connect"]["network.peer.port"] == 8080
    assert server_events["dns.response"]["dns.question.name"] == "collector.evil.test"
    assert server_events["dns.response"]["dns.answers"] == ["127.0.0.1"]
    # the seeded server started a minute earlier: its span is clamped to the call's window
    assert procs[100].start_time_unix_nano == ex.start_time_unix_nano

    # the deny is also an alert log record in the same trace, on the root span
    [log] = rx.log_records()
    assert stats["logs_exported"] == 1
    assert log.severity_number == 17 and log.severity_text == "ERROR"
    assert log.trace_id.hex() == trace_id and log.span_id == root.span_id
    la = attrs(log.attributes)
    assert la["mtguard.rules"] == ["secret-file-read", "undeclared-egress"]
    assert la["mtguard.alert.kind"] == "deny"


@pytest.mark.anyio
async def test_traceparent_makes_the_guard_a_child_of_the_agent() -> None:
    with run_receiver() as rx:
        with anyio.fail_after(15):
            async with open_telemetry(config(rx, include_content=True)) as tel:
                tid = tel.emit(allowed_record(), traceparent=f"00-{AGENT_TRACE}-{AGENT_SPAN}-01")
                bad = tel.emit(pre_denied_record(), traceparent="00-garbage-01")
    assert tid == AGENT_TRACE and bad != AGENT_TRACE
    spans = rx.spans()
    roots = {
        attrs(s.attributes)["jsonrpc.request.id"]: s
        for s in spans if s.name.startswith("tools/call")
    }
    assert roots["req-8"].trace_id.hex() == AGENT_TRACE
    assert roots["req-8"].parent_span_id.hex() == AGENT_SPAN
    assert roots["9"].parent_span_id == b"" and roots["9"].trace_id.hex() == bad
    ra = attrs(roots["req-8"].attributes)
    assert ra["gen_ai.tool.call.id"] == "8"
    assert ra["gen_ai.tool.call.arguments"] == "{}"  # opted in
    assert ra["mtguard.tree.complete"] is False
    # a call denied before execution has no execution or post-verification span
    nine = [s.name for s in spans if s.trace_id.hex() == bad]
    assert sorted(nine) == ["pre-audit", "tools/call send_email"]
    # both records were queued before the export task ran: one batch, one export request
    assert len(rx.traces) == 1
    assert rx.log_records()[0].severity_text == "ERROR"  # the pre-deny alerted


@pytest.mark.anyio
async def test_observe_and_incomplete_alerts_are_opt_in() -> None:
    with run_receiver() as rx:
        with anyio.fail_after(15):
            cfg = config(rx, alert_on=["incomplete-tree", "pinning-change"])
            async with open_telemetry(cfg) as tel:
                tel.emit(allowed_record("a"))  # incomplete tree → WARN
                tel.emit(denied_record("b"))  # "deny" not enabled → no alert
                tel.emit(pre_denied_record("c"), alert="pinning-change")
        logs = rx.log_records()
    kinds = sorted(attrs(lr.attributes)["mtguard.alert.kind"] for lr in logs)
    assert kinds == ["incomplete-tree", "pinning-change"]
    assert {lr.severity_text for lr in logs} == {"WARN", "ERROR"}
    assert tel.stats()["alerts"] == 2


@pytest.mark.anyio
async def test_otlp_grpc_exporter_delivers_spans_and_alerts() -> None:
    record = denied_record()
    with run_grpc_receiver() as rx:
        cfg = TelemetryConfig(exporter="otlp-grpc", endpoint=rx.url, export_timeout=5.0)
        with anyio.fail_after(15):
            async with open_telemetry(cfg) as tel:
                trace_id = tel.emit(record, traceparent=f"00-{AGENT_TRACE}-{AGENT_SPAN}-01")
    spans = rx.spans()
    assert trace_id == AGENT_TRACE
    assert len(spans) == 7 == tel.stats()["spans_exported"]
    root = next(s for s in spans if s.name == "tools/call read_note")
    assert root.parent_span_id.hex() == AGENT_SPAN
    [log] = rx.log_records()
    assert log.span_id == root.span_id and log.severity_text == "ERROR"


@pytest.mark.anyio
async def test_standard_otel_environment_selects_and_configures_otlp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with run_receiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        with anyio.fail_after(15):
            async with open_telemetry(TelemetryConfig()) as tel:  # nothing set in the config
                tel.emit(pre_denied_record())
    assert sorted(s.name for s in rx.spans()) == ["pre-audit", "tools/call send_email"]
    assert len(rx.log_records()) == 1 and tel.stats()["spans_exported"] == 2
