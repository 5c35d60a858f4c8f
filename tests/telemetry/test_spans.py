"""SpanBuilder edge cases: span counts, cycles in a malformed tree, event limits, alert kinds."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from mtguard_rt.model import FileEvent, ProcessNode
from mtguard_rt.telemetry.alerts import alert_kinds
from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id, parse_traceparent, span_count
from mtguard_rt.telemetry.viewtree import build_view

from .fixtures import MONO_T0, allowed_record, denied_record, pre_denied_record

RESOURCE = Resource.create({"service.name": "test"})


def test_span_count_matches_what_is_built() -> None:
    builder = SpanBuilder(RESOURCE)
    for record in (denied_record(), allowed_record(), pre_denied_record()):
        spans = builder.build(record, new_trace_id())
        assert len(spans) == span_count(record), record.call_id


def test_cyclic_parent_edges_terminate_and_keep_every_process() -> None:
    record = allowed_record()
    assert record.tree is not None
    record.tree.processes += [
        ProcessNode(key="a@1", pid=500, parent="b@1", start_ns=MONO_T0 + 50 * 1_000_000),
        ProcessNode(key="b@1", pid=501, parent="a@1", start_ns=MONO_T0 + 50 * 1_000_000),
    ]
    spans = SpanBuilder(RESOURCE).build(record, new_trace_id())
    pids = sorted(
        s.attributes["process.pid"]
        for s in spans if s.name.startswith("process")
    )
    assert pids == [100, 500, 501]
    labels = sorted(n.label for n in build_view(record))
    assert labels == ["process 500", "python3 /srv/notes_server.py"]


def test_event_limit_is_counted_not_silent() -> None:
    record = allowed_record()
    assert record.tree is not None
    record.tree.processes[0].files = [
        FileEvent(ts_ns=MONO_T0 + 50 * 1_000_000 + i, op="open", path=f"/tmp/f{i}")
        for i in range(300)
    ]
    spans = SpanBuilder(RESOURCE, max_events=100).build(record, new_trace_id())
    [proc] = [s for s in spans if s.name.startswith("process")]
    assert len(proc.events) == 100 and proc.dropped_events == 200


def test_traceparent_parsing() -> None:
    ctx = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert ctx is not None and ctx.is_remote and ctx.span_id == 0x00F067AA0BA902B7
    assert parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01") is None
    assert parse_traceparent("") is None and parse_traceparent(None) is None
    assert parse_traceparent({"traceparent": "x"}) is None  # hostile _meta, not a string


def test_alert_kinds() -> None:
    everything = ["deny", "observe-violation", "incomplete-tree", "pinning-change"]
    assert alert_kinds(denied_record(), None, ["deny"]) == ["deny"]
    assert alert_kinds(denied_record(), None, []) == []
    assert alert_kinds(allowed_record(), None, everything) == ["incomplete-tree"]
    assert alert_kinds(allowed_record(), "pinning-change", ["deny"]) == []
    assert alert_kinds(allowed_record(), "server-restarted", ["deny"]) == ["server-restarted"]
    observed = denied_record()
    observed.decision = "allow"
    for v in observed.violations:
        v.mode = "observe"
    assert alert_kinds(observed, None, everything) == ["observe-violation"]
    assert alert_kinds(observed, None, ["deny"]) == []
