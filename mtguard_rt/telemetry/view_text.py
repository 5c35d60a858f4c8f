"""Terminal rendering of audit records: one box-drawn tree per call.

Header (decision, tool, server, call id, phase, mode, total time), the violations with their
evidence, per-stage timings, tree completeness, then the processes with their files, network
and DNS. Nodes named by evidence are marked `◀ rule`; a process mtguard SIGKILLed says
`✗ killed: <why>`. ANSI colour only when asked (the CLI
asks on a TTY or with --color); untrusted text is stripped of control characters.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from ..model import AuditRecord
from .explain import rollback_lines
from .viewtree import ViewNode, between_view, build_view, outcome, stage_timings, tree_facts

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_STYLES = {
    "deny": "1;31", "allow": "1;32", "hit": "1;33", "dim": "2", "bold": "1", "process": "36",
    "net": "35", "dns": "34", "exec": "36", "note": "2", "warn": "33", "error": "1;35",
    "refused": "1;31", "signal": "33",
}


class _Paint:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, style: str, text: str) -> str:
        text = _CONTROL.sub("?", text)  # a hostile argv must not drive the terminal
        if not self.color or style not in _STYLES:
            return text
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"


def render_text(records: Iterable[AuditRecord], *, color: bool = False) -> str:
    paint = _Paint(color)
    records = list(records)
    blocks = [_record(r, paint) for r in records]
    status = [outcome(r)[0] for r in records]
    denied, errors = status.count("deny"), status.count("error")
    summary = f"{len(records)} calls · {denied} denied · {status.count('allow')} allowed"
    summary += f" · {errors} failed (server died)" if errors else ""
    return "\n".join([*blocks, paint("dim", summary) + "\n"])


def _record(r: AuditRecord, paint: _Paint) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.ts)) if r.ts else "?"
    phase = f" at {r.phase}" if r.phase else ""
    req = f" (request {r.request_id})" if r.request_id else ""
    status, why = outcome(r)
    lines = [
        f"{paint(status, status.upper())} {paint('bold', f'tools/call {r.tool}')}"
        f"  server {paint('bold', r.server)}  call {r.call_id}{req}{phase}  mode {r.mode}"
        f"  {r.timings_ms.total:.1f} ms  {when}Z"
    ]
    if why:
        lines.append(f"  {paint('error', '✗ no result: ' + why)}")
    if r.task:
        lines.append(f"  task: {paint('dim', r.task)}")
    for v in r.violations:
        style = "deny" if v.mode == "enforce" and r.decision == "deny" else "warn"
        rule = paint(style, "✗ " + v.rule)
        lines.append(f"  {rule} ({v.mode}, {v.phase}): {paint('', v.reason)}")
        for e in v.evidence:
            lines.append(f"      evidence: {paint('hit', e)}")
    lines += [f"  {paint('warn' if r.rollback and r.rollback.error else 'dim', x)}"
              for x in rollback_lines(r)]  # fmt: skip
    stages = " · ".join(f"{name} {ms:.1f}" for name, ms in stage_timings(r))
    lines.append(f"  timings: {stages} · total {r.timings_ms.total:.1f} ms")
    tree = r.tree
    if tree is None:
        lines.append(paint("dim", "  tree: none (not executed)"))
    else:
        state = "complete" if tree.complete else paint("warn", "INCOMPLETE")
        extra = "; ".join(tree.incomplete_reasons)
        drops = ", ".join(f"{k}={n}" for k, n in sorted(tree.drops.items()) if n)
        lines.append(
            f"  tree: {state}" + (f" ({extra})" if extra else "")
            + (f", drops {drops}" if drops else "") + f", {len(tree.processes)} process(es)"
        )
        lines += [f"  {paint('dim', x)}" for x in tree_facts(r)]
        nodes = build_view(r)
        for i, node in enumerate(nodes):
            _node(node, "  ", i == len(nodes) - 1, paint, lines)
        between = between_view(r)
        if between:
            lines.append(paint("bold", "  between calls (workers of earlier calls):"))
        for i, node in enumerate(between):
            _node(node, "  ", i == len(between) - 1, paint, lines)
    return "\n".join(lines) + "\n"


def _node(node: ViewNode, prefix: str, last: bool, paint: _Paint, out: list[str]) -> None:
    branch = "└── " if last else "├── "
    label = paint(node.kind, node.label)
    detail = f"  {paint('dim', '[' + node.detail + ']')}" if node.detail else ""
    failed = paint("warn", " (failed)") if node.failed else ""
    hit = f"  {paint('hit', '◀ ' + ', '.join(node.hits))}" if node.hits else ""
    killed = f"  {paint('deny', '✗ killed: ' + node.killed)}" if node.killed else ""
    when = paint("dim", f"+{node.at_ms:.1f}ms ") if node.at_ms is not None else ""
    out.append(f"{prefix}{branch}{when}{label}{detail}{failed}{killed}{hit}")
    child_prefix = prefix + ("    " if last else "│   ")
    for i, child in enumerate(node.children):
        _node(child, child_prefix, i == len(node.children) - 1, paint, out)
