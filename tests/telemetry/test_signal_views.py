"""Signals sent and links made, in every view of a tree: text tree, report nodes, spans,
the judge's summary and its simplified tree."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from mtguard_rt.audit.summary import summarize
from mtguard_rt.model import FileEvent, SignalEvent, Violation
from mtguard_rt.monitor.render import render_tree
from mtguard_rt.monitor.simplify import NoiseRules, simplify
from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id
from mtguard_rt.telemetry.viewtree import build_view

from .fixtures import MONO_T0, allowed_record

MS = 1_000_000
KILL = SignalEvent(ts_ns=MONO_T0 + 51 * MS, syscall="kill", signal=9, name="SIGKILL",
                   target_pid=7, target_key="101@1", target_host_pid=101,
                   target_argv=["sleep", "600"], relation="descendant", delivered=1)
OWN = SignalEvent(ts_ns=MONO_T0 + 51 * MS, syscall="tgkill", signal=23, name="SIGURG",
                  target_pid=1, thread=True, target_tid=3, relation="self", delivered=1)
LINK = FileEvent(ts_ns=MONO_T0 + 52 * MS, op="symlink", path="/srv/notes/x", target="../../etc")


def record():  # type: ignore[no-untyped-def]
    rec = allowed_record()
    assert rec.tree is not None
    server = rec.tree.processes[0]
    server.signals = [KILL, OWN]
    server.files.append(LINK)
    rec.violations = [Violation(rule="process-control", phase="post", mode="enforce",
                                reason="r", evidence=[f"pid 100 sent {KILL.summary}"])]
    return rec


def test_text_tree_and_report_nodes_show_the_signal_and_the_link() -> None:
    rec = record()
    text = render_tree(rec.tree)
    assert "signal kill SIGKILL -> pid 7 (sleep 600), descendant" in text
    assert "symlink /srv/notes/x -> ../../etc" in text
    [root] = build_view(rec)
    sigs = [n for n in root.children if n.kind == "signal"]
    assert [n.hits for n in sigs] == [["process-control"], []]  # the evidence names the kill
    assert any(n.kind == "file" and n.label.startswith("symlink") for n in root.children)


def test_spans_carry_signals_as_events() -> None:
    spans = SpanBuilder(Resource.create({"service.name": "t"})).build(record(), new_trace_id())
    events = [e for s in spans for e in s.events if e.name == "process.signal"]
    assert len(events) == 2
    attrs = events[0].attributes or {}
    assert attrs["mtguard.signal.name"] == "SIGKILL"
    assert attrs["mtguard.signal.target"] == "sleep 600"
    assert attrs["mtguard.signal.relation"] == "descendant"


def test_the_judge_sees_signals_to_others_not_a_runtimes_own() -> None:
    rec = record()
    assert rec.tree is not None
    [proc] = summarize(rec.tree)["processes"]
    assert proc["signals_sent"] == [KILL.summary]
    simple = simplify(rec.tree, NoiseRules())
    assert simple.processes[0].signals == [KILL] and simple.omitted["signal_self"] == 1
