"""Why one guarded call was decided as it was, from its audit record.

`explain_record` says, in order: the outcome and what it meant for the agent (blocked before
dispatch, result withheld, recorded only), each rule that fired with its mode, phase, reason,
evidence and the behavior-tree nodes that evidence names, then the tree's completeness and
the per-stage timings. Untrusted text (arguments, argv, paths) is stripped of control
characters.
"""

from __future__ import annotations

import json
import re
import time

from ..model import AuditRecord, Violation
from .viewtree import ViewNode, build_view, stage_timings

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
ARGUMENTS_WIDTH = 300  # characters of the arguments shown


def _clean(text: str) -> str:
    return _CONTROL.sub("?", text)


def outcome(record: AuditRecord) -> str:
    """One sentence: what the decision did to the call."""
    denying = [v.rule for v in record.violations if v.mode == "enforce"]
    if record.decision == "allow":
        if record.violations:
            return ("allowed: the rules that fired only observe "
                    f"({', '.join(v.rule for v in record.violations)})")
        return "allowed: no rule fired"
    rules = ", ".join(denying) or ", ".join(record.rules)
    if record.mode == "observe":
        return (f"deny recorded, nothing blocked: the guard ran in observe mode ({rules}); "
                "the agent got the result")
    if record.phase == "pre":
        return f"denied before dispatch by {rules}: the server never ran the call"
    return f"denied after execution by {rules}: the server ran the call and its result was withheld"


ROLLBACK_ACTIONS = {
    "committed": "committed, the call's changes are the new baseline",
    "restored": "restored, the workspace is back as it was before the call",
    "kept": "kept (observe mode), nothing rolled back; a rollback would have undone",
    "failed": "FAILED",
}
ROLLBACK_PATHS_SHOWN = 10


def rollback_lines(record: AuditRecord) -> list[str]:
    """What the workspace rollback did with the call's file changes (none when it is off)."""
    rb = record.rollback
    if rb is None:
        return []
    counts = f"{rb.created} created, {rb.modified} modified, {rb.deleted} deleted"
    lines = [f"workspace rollback ({rb.mode}): {ROLLBACK_ACTIONS[rb.action]}: {counts}, "
             f"{rb.ms:.1f} ms"]  # fmt: skip
    if rb.paths:
        more = len(rb.paths) - ROLLBACK_PATHS_SHOWN + rb.unlisted
        shown = ", ".join(_clean(p) for p in rb.paths[:ROLLBACK_PATHS_SHOWN])
        lines.append(f"  paths: {shown}" + (f" (+{more} more)" if more > 0 else ""))
    if rb.error:
        lines.append(f"  error: {_clean(rb.error)}")
    lines += [f"  not restored: {_clean(f)}" for f in rb.failed]
    if rb.fallback:
        lines.append(f"  scanned the whole workspace: {_clean(rb.fallback)}")
    if rb.synced:
        lines.append(f"  {rb.synced} entries changed between calls, taken as the baseline")
    return lines


def _hit_paths(nodes: list[ViewNode], rule: str, trail: tuple[str, ...] = ()) -> list[str]:
    out = []
    for node in nodes:
        here = (*trail, node.label + (f" [{node.detail}]" if node.detail else ""))
        if rule in node.hits:
            out.append(" > ".join(here))
        out.extend(_hit_paths(node.children, rule, here))
    return out


def _violation(v: Violation, record: AuditRecord, nodes: list[ViewNode]) -> list[str]:
    if v.mode == "enforce" and record.decision == "deny" and record.mode == "enforce":
        effect = "denied"
    elif v.mode == "enforce":
        effect = "would deny (observe mode)"
    else:
        effect = "recorded only (rule observes)"
    lines = [f"  {v.rule}: {effect}; {v.phase}-execution, mode {v.mode}",
             f"    why: {_clean(v.reason)}"]
    lines += [f"    evidence: {_clean(e)}" for e in v.evidence]
    lines += [f"    in the tree: {_clean(p)}" for p in _hit_paths(nodes, v.rule)]
    return lines


def explain_record(record: AuditRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.ts)) if record.ts else "?"
    args = json.dumps(record.arguments, ensure_ascii=False)
    if len(args) > ARGUMENTS_WIDTH:
        args = args[: ARGUMENTS_WIDTH - 3] + "..."
    req = f" (request {record.request_id})" if record.request_id else ""
    lines = [
        f"call {record.call_id}{req}: tools/call {_clean(record.tool)} on {record.server}"
        f" at {when}Z",
        f"  arguments: {_clean(args)}",
        f"  task: {_clean(record.task) if record.task else '(none given)'}",
        f"decision: {record.decision.upper()}"
        + (f" at {record.phase}-execution" if record.phase else "")
        + f", guard mode {record.mode}" + (", LLM judge consulted" if record.llm_used else ""),
        f"  {outcome(record)}",
    ]
    nodes = build_view(record) if record.tree is not None else []
    if record.violations:
        lines.append(f"rules fired ({len(record.violations)}):")
        for v in record.violations:
            lines += _violation(v, record, nodes)
    tree = record.tree
    if tree is None:
        lines.append("tree: none, the call was not executed")
    elif not tree.traced:
        lines.append("tree: nothing traced (no local process to watch)")
    else:
        state = "complete" if tree.complete else "INCOMPLETE (" + "; ".join(
            tree.incomplete_reasons or ["no reason given"]) + ")"
        lines.append(f"tree: {state}, {len(tree.processes)} process(es)")
    lines += rollback_lines(record)
    stages = ", ".join(f"{name} {ms:.1f}" for name, ms in stage_timings(record))
    lines.append(f"timings (ms): {stages}, total {record.timings_ms.total:.1f}")
    return "\n".join(lines) + "\n"


__all__ = ["explain_record", "outcome", "rollback_lines"]
