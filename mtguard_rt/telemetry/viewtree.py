"""The viewers' shared layout: a record's behavior tree as labelled nodes, evidence matched.

Processes nest by parent edges; each process's effects (exec, file, network, DNS, signals
sent) and child
processes are interleaved in time order. A node is a *hit* for a rule when that rule's
`Violation.evidence` names it: the process's pid ("pid 102") or key ("102@…"), a file path,
"address:port", or a DNS name, matched on token boundaries. Nesting deeper than `MAX_DEPTH`
is cut with a marker node, so a hostile fork chain cannot exhaust the renderers' recursion.
Workers (processes left running by the call) say so; connections the network policy refused
are `refused` nodes; `between_view` lays out the between-call activity the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..model import (
    AuditRecord,
    BehaviorTree,
    DnsEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
    SignalEvent,
    Violation,
)

MAX_DEPTH = 100
_PID = re.compile(r"\bpid[\s=:#]*(\d+)", re.IGNORECASE)
_KEY = re.compile(r"\b(\d+@\d+)\b")
_EDGE = r"[\w./~:@-]"


@dataclass
class ViewNode:
    kind: str  # process | exec | file | net | refused | dns | signal | note
    label: str
    detail: str = ""
    hits: list[str] = field(default_factory=list)  # rule ids whose evidence names this node
    failed: bool = False  # the syscall failed (result < 0)
    killed: str | None = None  # process: why mtguard SIGKILLed it (ProcessNode.killed_by)
    at_ms: float | None = None  # when, relative to the call's window; None: before it
    children: list[ViewNode] = field(default_factory=list)


class EvidenceIndex:
    """Which rules' evidence names a pid, key, path, address or DNS name."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self._items = [(v.rule, e) for v in violations for e in v.evidence]
        self._pids: dict[int, list[str]] = {}
        self._keys: dict[str, list[str]] = {}
        for rule, text in self._items:
            for m in _PID.finditer(text):
                self._pids.setdefault(int(m.group(1)), []).append(rule)
            for m in _KEY.finditer(text):
                self._keys.setdefault(m.group(1), []).append(rule)

    def process(self, node: ProcessNode) -> list[str]:
        return _unique(self._keys.get(node.key, []) + self._pids.get(node.pid, []))

    def mentions(self, *tokens: str | None) -> list[str]:
        rules: list[str] = []
        for token in tokens:
            if not token:
                continue
            pattern = re.compile(rf"(?<!{_EDGE}){re.escape(token)}(?!{_EDGE})")
            rules.extend(rule for rule, text in self._items if pattern.search(text))
        return _unique(rules)


def _unique(rules: list[str]) -> list[str]:
    return list(dict.fromkeys(rules))


def outcome(record: AuditRecord) -> tuple[str, str]:
    """(status, why) the viewers show: `deny`, `allow`, or `error` for an allowed call whose
    server never answered it (exited, was killed online, timed out, the call was cancelled):
    the guard's own error message is in the record's reasons, prefixed `mtguard: `."""
    if record.decision == "deny":
        return "deny", ""
    why = next((r for r in record.reasons if r.startswith("mtguard: ")), "")
    if why or record.terminated:
        return "error", why.removeprefix("mtguard: ") or "terminated online"
    return "allow", ""


def build_view(record: AuditRecord) -> list[ViewNode]:
    """Top-level nodes for `record`: root processes, then unattributed DNS and refusals."""
    if record.tree is None:
        return []
    return tree_view(record.tree, EvidenceIndex(record.violations))


def between_view(record: AuditRecord) -> list[ViewNode]:
    """What earlier calls' workers did between the previous window and this call's."""
    if record.tree is None or record.tree.between is None:
        return []
    return tree_view(record.tree.between, EvidenceIndex(record.violations))


def tree_view(tree: BehaviorTree, index: EvidenceIndex) -> list[ViewNode]:
    workers = set(tree.workers)
    children: dict[str, list[ProcessNode]] = {}
    for p in tree.processes:
        if p.parent is not None:
            children.setdefault(p.parent, []).append(p)
    seen: set[str] = set()

    def process(node: ProcessNode, depth: int) -> ViewNode:
        seen.add(node.key)
        status = [f"pid {node.pid}"]
        if node.learned == "seeded":
            status.append("seeded")
        if node.key in workers:
            status.append("worker: still running after the call")
        elif node.still_running:
            status.append("running")
        elif node.killed_by is not None:
            status.append("killed")
        elif node.exit_code is not None:
            status.append(f"exit {node.exit_code}")
        label = node.command_line or f"process {node.pid}"
        out = ViewNode("process", label, ", ".join(status), index.process(node))
        out.killed = node.killed_by
        timed: list[tuple[int, ViewNode]] = []
        timed += [(e.ts_ns, ViewNode("exec", f"exec {e.path}", " ".join(e.argv),
                                     index.mentions(e.path), e.result < 0)) for e in node.execs]
        timed += [(f.ts_ns, file_node(f, index)) for f in node.files]
        timed += [(n.ts_ns, net_node(n, index)) for n in node.net]
        timed += [(d.ts_ns, dns_node(d, index)) for d in node.dns]
        timed += [(g.ts_ns, signal_node(g, index)) for g in node.signals]
        kids = [c for c in children.get(node.key, []) if c.key not in seen]
        if kids and depth >= MAX_DEPTH:
            timed.append((kids[0].start_ns, ViewNode("note", f"… {len(kids)} deeper process(es)")))
        else:
            timed += [(c.start_ns, process(c, depth + 1)) for c in kids]
        timed.sort(key=lambda t: t[0])
        for ts, child in timed:
            child.at_ms = at(ts)
        out.children = [n for _, n in timed]
        return out

    def at(ts: int) -> float | None:
        return (ts - tree.window_start_ns) / 1e6 if ts >= tree.window_start_ns else None

    top = [(p.start_ns, process(p, 0)) for p in tree.roots() if p.key not in seen]
    top += [(p.start_ns, process(p, 0)) for p in tree.processes if p.key not in seen]  # cycles
    top += [(d.ts_ns, dns_node(d, index)) for d in tree.dns]
    top += [(n.ts_ns, net_node(n, index, "no process")) for n in tree.refused]
    for ts, node in top:
        node.at_ms = at(ts)
    return [n for _, n in top]


def file_node(f: FileEvent, index: EvidenceIndex) -> ViewNode:
    label = f"{f.op} {f.path}" + (f" → {f.target}" if f.target else "")
    detail = ",".join(f.flags) + (f" mode {f.mode:o}" if f.mode is not None else "")
    if f.result < 0:
        detail = f"{detail} errno {-f.result}".strip()
    return ViewNode("file", label, detail, index.mentions(f.path, f.target), f.result < 0)


def net_node(n: NetEvent, index: EvidenceIndex, whose: str = "") -> ViewNode:
    where = f"[{n.address}]:{n.port}" if n.family == "ipv6" else f"{n.address}:{n.port}"
    hits = index.mentions(where, f"{n.address}:{n.port}")
    detail = n.family if n.egress or n.op == "accept" else f"{n.family}, not egress"
    detail = f"{detail}, {whose}" if whose else detail
    return ViewNode("refused" if n.refused else "net", n.summary, detail, hits,
                    n.result < 0 and not n.refused)


def signal_node(g: SignalEvent, index: EvidenceIndex) -> ViewNode:
    detail = "started in this call" if g.started_in_call else ""
    return ViewNode("signal", f"signal {g.summary}", detail,
                    index.mentions(g.target_key, g.summary), g.result < 0)


def dns_node(d: DnsEvent, index: EvidenceIndex) -> ViewNode:
    answers = f" → {', '.join(d.answers)}" if d.answers else ""
    return ViewNode("dns", f"dns {d.direction} {d.name} {d.qtype}{answers}", d.server or "",
                    index.mentions(d.name))


def tree_facts(r: AuditRecord) -> list[str]:
    """Network policy, refusals, workers and between-call activity, one line each."""
    tree, out = r.tree, list[str]()
    if tree is None:
        return out
    if tree.network_policy:
        out.append("network policy: only " + ", ".join(tree.network_policy))
    refused = sum(n.refused for p in tree.processes for n in p.net) + sum(
        n.refused for n in tree.refused)
    if refused:
        out.append(f"refused by network policy: {refused} attempt(s)/packet(s)")
    if tree.workers:
        out.append(f"workers left running: {len(tree.workers)} ({', '.join(tree.workers)})")
    if tree.between is not None:
        b = tree.between
        out.append(f"between calls: {len(b.processes)} process(es), since call "
                   f"{b.call.call_id} ({b.call.tool})")
    return out


def stage_timings(record: AuditRecord) -> list[tuple[str, float]]:
    t = record.timings_ms
    return [("pre", t.pre), ("exec", t.exec), ("settle", t.settle), ("post", t.post)]
