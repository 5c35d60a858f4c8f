"""One audit record + its behavior tree → the spans of one trace fragment.

Root `tools/call {tool}` (SERVER) with MCP/GenAI attributes and `mtguard.*`; children
`pre-audit`, `execution`, `post-verification`; under `execution` one span per process,
nested by the tree's parent edges, with file/network/DNS effects as span events. Times are
the kernel's (`ts_ns + wall_offset_ns`). Built after the call by the export task, never on
the call path; a W3C `traceparent` makes the root a child of the agent's span.

`execution` also carries the network policy (`mtguard.network.policy`), refusals
(`mtguard.network.refused`, events `network.refused` for those no process is named for), the
workers left running (`mtguard.tree.workers`; their process spans say
`mtguard.process.worker`) and the between-call activity of earlier calls' workers as
`mtguard.between.*` events. A call whose server never answered (exited, killed online, timed
out) has an ERROR status and `mtguard.outcome` = "error", not a silent OK.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..model import AuditRecord, BehaviorTree, NetEvent, ProcessNode, Violation
from .viewtree import outcome

_MS = 1_000_000
_propagator = TraceContextTextMapPropagator()
_random_ids = RandomIdGenerator()
Attrs = dict[str, Any]


def parse_traceparent(traceparent: object) -> SpanContext | None:
    """The agent's span context from a W3C `traceparent` string, or None if absent/invalid.

    The value comes from the agent's `_meta`: anything that is not a valid header is ignored.
    """
    if not isinstance(traceparent, str) or not traceparent or len(traceparent) > 512:
        return None
    ctx = _propagator.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None


def new_trace_id() -> int:
    return _random_ids.generate_trace_id()


def span_count(record: AuditRecord) -> int:
    """How many spans `SpanBuilder.build` makes for `record` (for counting drops cheaply)."""
    if record.decision == "deny" and record.phase == "pre":
        return 2
    return 4 + (len(record.tree.processes) if record.tree is not None else 0)


def _clean(attrs: Mapping[str, Any]) -> Attrs:
    return {k: v for k, v in attrs.items() if v is not None}


class _Collector(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


class _PresetTraceIds(IdGenerator):
    """Random span ids; the trace id is the one `emit` already returned to the caller."""

    def __init__(self) -> None:
        self.trace_id = 0

    def generate_span_id(self) -> int:
        return _random_ids.generate_span_id()

    def generate_trace_id(self) -> int:
        return self.trace_id


class SpanBuilder:
    """Turns records into finished `ReadableSpan`s with a private tracer (no global state)."""

    def __init__(
        self, resource: Resource, *, include_content: bool = False, max_events: int = 1024
    ) -> None:
        self._include_content = include_content
        self._ids = _PresetTraceIds()
        self._collector = _Collector()
        provider = TracerProvider(
            resource=resource,
            sampler=ALWAYS_ON,
            id_generator=self._ids,
            span_limits=SpanLimits(max_events=max_events, max_attribute_length=8192),
            shutdown_on_exit=False,
        )
        provider.add_span_processor(self._collector)
        self._tracer = provider.get_tracer("mtguard_rt.telemetry")

    def build(
        self, record: AuditRecord, trace_id: int, parent: SpanContext | None = None
    ) -> list[ReadableSpan]:
        self._ids.trace_id = trace_id
        self._collector.spans = []
        self._build(record, parent)
        spans, self._collector.spans = self._collector.spans, []
        return spans

    def _start(
        self, name: str, parent: trace.Span | SpanContext | None, start: int, attrs: Attrs,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> trace.Span:
        ctx: Context | None = None
        if isinstance(parent, SpanContext):
            ctx = trace.set_span_in_context(NonRecordingSpan(parent))
        elif parent is not None:
            ctx = trace.set_span_in_context(parent)
        else:
            ctx = Context()  # never inherit an ambient span: the parent is explicit
        return self._tracer.start_span(
            name, context=ctx, kind=kind, attributes=_clean(attrs), start_time=start
        )

    def _build(self, record: AuditRecord, parent: SpanContext | None) -> None:
        tree, t = record.tree, record.timings_ms
        start = int(record.ts * 1e9) if record.ts else 0
        if not start:
            start = tree.window_start_ns + tree.wall_offset_ns if tree else time.time_ns()
        pre_end = start + int(t.pre * _MS)
        executed = not (record.decision == "deny" and record.phase == "pre")
        exec_start, exec_end = pre_end, pre_end + int((t.exec + t.settle) * _MS)
        if tree is not None and tree.traced and tree.window_end_ns > tree.window_start_ns:
            exec_start = tree.window_start_ns + tree.wall_offset_ns
            exec_end = tree.window_end_ns + tree.wall_offset_ns
        post_start = max(exec_end, pre_end) if executed else pre_end
        post_end = post_start + int(t.post * _MS)
        root_end = max(start + int(t.total * _MS), post_end if executed else pre_end)

        denied = record.decision == "deny"
        root = self._start(
            f"tools/call {record.tool}", parent, min(start, exec_start), self._root_attrs(record),
            SpanKind.SERVER,
        )
        status, why = outcome(record)
        if denied:
            root.set_status(Status(StatusCode.ERROR, f"denied: {', '.join(record.rules)}"))
        elif status == "error":
            root.set_status(Status(StatusCode.ERROR, f"no result: {why}"))
        by_phase = {"pre": [v for v in record.violations if v.phase == "pre"],
                    "post": [v for v in record.violations if v.phase == "post"]}
        self._phase(
            root, "pre-audit", start, pre_end, by_phase["pre"], denied and record.phase == "pre"
        )
        if executed:
            ex = self._start("execution", root, exec_start, _tree_attrs(tree))
            if tree is not None:
                for dns in tree.dns:
                    _dns_event(ex, dns, tree.wall_offset_ns)
                for n in tree.refused:
                    _net_event(ex, n, tree.wall_offset_ns, "network.refused")
                if tree.between is not None:
                    _between_events(ex, tree.between)
                self._processes(ex, tree, exec_start, exec_end)
            ex.end(max(exec_end, exec_start))
            self._phase(
                root, "post-verification", post_start, post_end, by_phase["post"],
                denied and record.phase == "post",
            )
        root.end(root_end)

    def _root_attrs(self, record: AuditRecord) -> Attrs:
        t = record.timings_ms
        drops = sum(record.tree.drops.values()) if record.tree else 0
        attrs: Attrs = {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": record.tool,
            "gen_ai.tool.call.id": record.call_id,
            "jsonrpc.request.id": record.request_id or record.call_id,
            "mtguard.server": record.server,
            "mtguard.decision": record.decision,
            "mtguard.phase": record.phase,
            "mtguard.mode": record.mode,
            "mtguard.rules": list(record.rules),
            "mtguard.reasons": list(record.reasons),
            "mtguard.llm_used": record.llm_used,
            "mtguard.tree.complete": record.tree_complete,
            "mtguard.tree.drops": drops,
            "mtguard.timings.pre_ms": t.pre,
            "mtguard.timings.exec_ms": t.exec,
            "mtguard.timings.settle_ms": t.settle,
            "mtguard.timings.post_ms": t.post,
            "mtguard.timings.total_ms": t.total,
        }
        status, why = outcome(record)
        attrs["mtguard.outcome"] = status
        if record.decision == "deny":
            attrs["error.type"] = "mtguard.denied"
        elif status == "error":
            attrs["error.type"] = "mtguard.no_result"
            attrs["mtguard.error"] = why
        if record.rollback is not None:  # workspace rollback: counts, not paths (content)
            rb = record.rollback
            attrs["mtguard.rollback.action"] = rb.action
            attrs["mtguard.rollback.changed"] = rb.created + rb.modified + rb.deleted
            attrs["mtguard.rollback.ms"] = rb.ms
            if rb.error:
                attrs["mtguard.rollback.error"] = rb.error
        if self._include_content:  # the GenAI conventions make content opt-in
            attrs["mtguard.task"] = record.task
            attrs["gen_ai.tool.call.arguments"] = json.dumps(record.arguments, default=str)
            if record.result is not None:
                attrs["gen_ai.tool.call.result"] = json.dumps(record.result, default=str)
        return attrs

    def _phase(
        self, root: trace.Span, name: str, start: int, end: int,
        violations: Sequence[Violation], denied: bool,
    ) -> None:
        span = self._start(name, root, start, {
            "mtguard.decision": "deny" if denied else "allow",
            "mtguard.rules": [v.rule for v in violations],
        })
        for v in violations:
            span.add_event("mtguard.violation", _clean({
                "mtguard.rule": v.rule, "mtguard.mode": v.mode, "mtguard.reason": v.reason,
                "mtguard.evidence": list(v.evidence),
            }), timestamp=end)
        if denied:
            span.set_status(Status(StatusCode.ERROR, ", ".join(v.rule for v in violations)))
        span.end(end)

    def _processes(self, execution: trace.Span, tree: BehaviorTree, lo: int, hi: int) -> None:
        """Depth-first over parent edges with an explicit stack (trees can be deep)."""
        off = tree.wall_offset_ns
        stack: list[tuple[ProcessNode, trace.Span]] = [
            (p, execution) for p in reversed(tree.roots())
        ]
        children: dict[str, list[ProcessNode]] = {}
        for p in tree.processes:
            if p.parent is not None:
                children.setdefault(p.parent, []).append(p)
        seen: set[str] = set()
        workers = set(tree.workers)
        orphans = iter(tree.processes)  # nodes only reachable through a cycle, if any
        while True:
            if not stack:
                node = next((p for p in orphans if p.key not in seen), None)
                if node is None:
                    break
                stack.append((node, execution))
            node, parent = stack.pop()
            if node.key in seen:  # a malformed tree with a cycle must not loop forever
                continue
            seen.add(node.key)
            start = min(max(node.start_ns + off, lo), hi)
            end = hi if node.end_ns is None else min(max(node.end_ns + off, start), hi)
            attrs = _process_attrs(node, off)
            if node.key in workers:
                attrs["mtguard.process.worker"] = True
            span = self._start(_process_name(node), parent, start, attrs)
            if node.killed_by:
                span.set_status(Status(StatusCode.ERROR, f"killed: {node.killed_by}"))
            _effects(span, node, off)
            span.end(end)
            stack.extend((c, span) for c in reversed(children.get(node.key, [])))


def _effects(span: trace.Span, node: ProcessNode, off: int, prefix: str = "") -> None:
    """A process's execs, files, network, DNS and signals sent as events on `span` (names
    after `prefix`)."""
    for ex in node.execs:
        span.add_event(f"{prefix}process.exec", _clean({
            "process.executable.path": ex.path,
            "process.command_line": " ".join(ex.argv) or None,
            "mtguard.result": ex.result,
        }), timestamp=ex.ts_ns + off)
    for f in node.files:
        span.add_event(f"{prefix}file.{f.op}", _clean({
            "file.path": f.path, "mtguard.file.resolved": f.resolved,
            "mtguard.file.target": f.target, "mtguard.file.flags": f.flags or None,
            "mtguard.file.mode": f.mode, "mtguard.result": f.result,
        }), timestamp=f.ts_ns + off)
    for n in node.net:
        _net_event(span, n, off, f"{prefix}network.{n.op}")
    for d in node.dns:
        _dns_event(span, d, off, prefix)
    for g in node.signals:
        span.add_event(f"{prefix}process.signal", _clean({
            "mtguard.signal.syscall": g.syscall, "mtguard.signal.number": g.signal,
            "mtguard.signal.name": g.name, "mtguard.signal.target_pid": g.target_pid,
            "mtguard.signal.target_key": g.target_key,
            "mtguard.signal.target_host_pid": g.target_host_pid,
            "mtguard.signal.target": " ".join(g.target_argv) or g.target_comm,
            "mtguard.signal.relation": g.relation,
            "mtguard.signal.started_in_call": g.started_in_call,
            "mtguard.signal.delivered": g.delivered, "mtguard.result": g.result,
        }), timestamp=g.ts_ns + off)


def _net_event(span: trace.Span, n: NetEvent, off: int, name: str) -> None:
    attrs: Attrs = {
        "network.peer.address": n.address, "network.peer.port": n.port,
        "network.type": n.family, "mtguard.result": n.result,
        "network.transport": n.transport, "mtguard.network.sent": n.sent,
        "mtguard.network.egress": n.egress,
    }
    if n.refused:
        attrs["mtguard.network.refused"] = n.refused
    span.add_event(name, attrs, timestamp=n.ts_ns + off)


def _between_events(span: trace.Span, between: BehaviorTree) -> None:
    """Earlier calls' workers between windows: one `mtguard.between.process` event per
    process (its key names it), then its effects as `mtguard.between.*` events."""
    off = between.wall_offset_ns
    for p in between.processes:
        span.add_event("mtguard.between.process", _clean({
            "mtguard.process.key": p.key, "process.pid": p.pid,
            "process.command_line": p.command_line or None,
            "process.executable.path": p.exe or None,
            "mtguard.between.since_call": between.call.call_id,
        }), timestamp=(p.start_ns or between.window_start_ns) + off)
        _effects(span, p, off, "mtguard.between.")
    for d in between.dns:
        _dns_event(span, d, off, "mtguard.between.")
    for n in between.refused:
        _net_event(span, n, off, "mtguard.between.network.refused")


def _dns_event(span: trace.Span, d: Any, off: int, prefix: str = "") -> None:
    span.add_event(f"{prefix}dns.{d.direction}", _clean({
        "dns.question.name": d.name, "mtguard.dns.qtype": d.qtype,
        "dns.answers": d.answers or None, "mtguard.dns.server": d.server,
        "process.pid": d.pid,
    }), timestamp=d.ts_ns + off)


def _process_name(node: ProcessNode) -> str:
    name = os.path.basename(node.exe) if node.exe else (node.argv[0] if node.argv else "?")
    return f"process {name}"


def _process_attrs(node: ProcessNode, off: int) -> Attrs:
    return {
        "process.pid": node.pid,
        "process.parent_pid": node.ppid,
        "process.executable.path": node.exe or None,
        "process.command_line": node.command_line or None,
        "process.working_directory": node.cwd,
        "process.user.id": node.uid,
        "process.exit.code": node.exit_code,
        "mtguard.process.key": node.key,
        "mtguard.process.learned": node.learned,
        "mtguard.process.still_running": node.still_running,
        "mtguard.process.killed_by": node.killed_by,
        "mtguard.process.argv_truncated": node.argv_truncated,
        "mtguard.process.start_unix_ns": node.start_ns + off if node.start_ns else None,
    }


def _tree_attrs(tree: BehaviorTree | None) -> Attrs:
    if tree is None:
        return {"mtguard.tree.traced": False}
    attrs: Attrs = {
        "mtguard.tree.traced": tree.traced,
        "mtguard.tree.complete": tree.complete,
        "mtguard.tree.incomplete_reasons": list(tree.incomplete_reasons) or None,
        "mtguard.tree.processes": len(tree.processes),
    }
    for kind, n in tree.drops.items():
        attrs[f"mtguard.tree.drops.{kind}"] = n
    if tree.network_policy:
        attrs["mtguard.network.policy"] = list(tree.network_policy)
    refused = sum(n.refused for p in tree.processes for n in p.net)
    refused += sum(n.refused for n in tree.refused)
    if refused:
        attrs["mtguard.network.refused"] = refused
    if tree.workers:
        attrs["mtguard.tree.workers"] = list(tree.workers)
    if tree.between is not None:
        attrs["mtguard.between.processes"] = len(tree.between.processes)
        attrs["mtguard.between.since_call"] = tree.between.call.call_id
    return attrs
