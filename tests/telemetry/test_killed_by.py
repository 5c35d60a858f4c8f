"""`killed_by` in every viewer: the terminal tree, the HTML report and the process spans.

A process mtguard SIGKILLed (kill on touch in the kernel, or an online rule) must say so
where people look, next to the process, not only in the JSON: `✗ killed: <why>`.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import StatusCode

from mtguard_rt.model import AuditRecord, NetEvent
from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id
from mtguard_rt.telemetry.view_html import render_html
from mtguard_rt.telemetry.view_text import render_text
from mtguard_rt.telemetry.viewtree import build_view

from .fixtures import MONO_T0, MS, SSH_KEY, denied_record
from .test_viewers import page_data, walk

WHY = f"kill-on-touch: open of {SSH_KEY}"


def killed_record() -> AuditRecord:
    record = denied_record()
    assert record.tree is not None
    cat = next(p for p in record.tree.processes if p.pid == 102)
    cat.killed_by = WHY
    cat.exit_code = None  # SIGKILLed: no exit_group code
    return record


def test_terminal_tree_shows_who_was_killed_and_why() -> None:
    text = render_text([killed_record()])
    (line,) = [line for line in text.splitlines() if "[pid 102" in line]
    assert f"✗ killed: {WHY}" in line and "[pid 102, killed]" in line
    assert "✗ killed" not in render_text([denied_record()])  # nothing killed, nothing shown
    coloured = render_text([killed_record()], color=True)
    assert f"\x1b[1;31m✗ killed: {WHY}\x1b[0m" in coloured


def test_html_report_shows_the_kill_escaped() -> None:
    record = killed_record()
    assert record.tree is not None
    record.tree.processes[2].killed_by = "kill-on-touch: open of /tmp/<b>x</b>"
    page = render_html([record])
    assert "/tmp/<b>" not in page and "/tmp/\\u003cb\\u003ex" in page  # escaped for <script>
    data = page_data(page)
    (killed,) = [n for n in walk(data, 0) if n[5] >= 0]  # the node carries why, as data
    assert data["s"][killed[5]] == "kill-on-touch: open of /tmp/<b>x</b>" and killed[6]
    assert "'killed'" in page  # the page's script marks the node and prints the reason
    assert all(n[5] < 0 for n in walk(page_data(render_html([denied_record()])), 0))


def test_process_span_carries_killed_by_and_an_error_status() -> None:
    spans = SpanBuilder(Resource.create({"service.name": "t"})).build(
        killed_record(), new_trace_id()
    )
    procs = {
        dict(s.attributes or {})["process.pid"]: s for s in spans if s.name.startswith("process")
    }
    assert dict(procs[102].attributes or {})["mtguard.process.killed_by"] == WHY
    assert procs[102].status.status_code == StatusCode.ERROR
    assert procs[102].status.description == f"killed: {WHY}"
    assert "mtguard.process.killed_by" not in dict(procs[101].attributes or {})


def test_network_nodes_and_spans_say_transport_and_datagrams() -> None:
    record = denied_record()
    assert record.tree is not None
    srv = record.tree.processes[0]
    srv.net = [
        NetEvent(
            ts_ns=MONO_T0 + 8 * MS,
            op="connect",
            family="ipv6",
            address="2001:4860:4860::8888",
            port=443,
            transport="udp",
        ),
        NetEvent(
            ts_ns=MONO_T0 + 9 * MS,
            op="send",
            family="ipv4",
            address="127.0.0.1",
            port=9999,
            transport="udp",
            sent=3,
        ),
    ]
    labels = [n.label for n in build_view(record)[0].children if n.kind == "net"]
    assert labels == [
        "connect udp [2001:4860:4860::8888]:443, no datagram sent",
        "send udp 127.0.0.1:9999, 3 datagrams",
    ]
    text = render_text([record])
    assert "connect udp [2001:4860:4860::8888]:443, no datagram sent  [ipv6, not egress]" in text
    spans = SpanBuilder(Resource.create({"service.name": "t"})).build(record, new_trace_id())
    server = next(s for s in spans if dict(s.attributes or {}).get("process.pid") == 100)
    events = {
        e.name: dict(e.attributes or {}) for e in server.events if e.name.startswith("network.")
    }
    assert events["network.connect"]["network.transport"] == "udp"
    assert events["network.connect"]["mtguard.network.egress"] is False
    assert events["network.send"]["mtguard.network.sent"] == 3
