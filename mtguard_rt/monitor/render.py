"""Render a `BehaviorTree` as an indented text tree for a terminal (`mtguard trace`).

One line per process (pid, command, how it was learned, exit), its effects indented under
it in time order, children after their parent, then unattributed DNS and completeness.
Raw names are shown with Python's escaping, so a control character cannot forge a line.
"""

from __future__ import annotations

from ..model import (
    BehaviorTree,
    DnsEvent,
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
    SignalEvent,
)

Effect = FileEvent | NetEvent | DnsEvent | ExecEvent | SignalEvent


def _safe(s: str) -> str:
    return s.encode("unicode_escape").decode("ascii") if not s.isprintable() else s


def _result(r: int) -> str:
    return "" if r >= 0 else f"  -> error {-r}"


def _effect(e: Effect) -> str:
    if isinstance(e, FileEvent):
        target = f" -> {_safe(e.target)}" if e.target else ""
        flags = f" [{','.join(e.flags)}]" if e.flags else ""
        mode = f" mode={e.mode:o}" if e.mode is not None else ""
        unres = " (unresolved)" if not e.resolved else ""
        return f"{e.op} {_safe(e.path)}{target}{flags}{mode}{unres}{_result(e.result)}"
    if isinstance(e, NetEvent):
        return f"{e.summary}{_result(e.result)}"
    if isinstance(e, SignalEvent):
        return f"signal {_safe(e.summary)}"
    if isinstance(e, DnsEvent):
        answers = f" = {', '.join(e.answers)}" if e.answers else ""
        via = f" via {e.server}" if e.server else ""
        return f"dns {e.direction} {e.qtype} {_safe(e.name)}{answers}{via}"
    argv = " ".join(_safe(a) for a in e.argv)
    cut = f" …(truncated, {e.argv_len} bytes)" if e.argv_truncated else ""
    return f"exec {_safe(e.path)}: {argv}{cut}{_result(e.result)}"


def _head(p: ProcessNode) -> str:
    parts = [f"[{p.pid}] {_safe(p.command_line)[:200]}"]
    if p.learned == "seeded":
        parts.append("(seeded)")
    if p.cwd:
        parts.append(f"cwd={_safe(p.cwd)}")
    if p.uid is not None:
        parts.append(f"uid={p.uid}")
    if p.killed_by:
        parts.append(f"✗ killed: {_safe(p.killed_by)}")
    if p.still_running:
        parts.append("STILL RUNNING")
    elif p.exit_code is not None:
        parts.append(f"exit={p.exit_code}")
    elif p.end_ns is not None:
        parts.append("exit=signal")
    return " ".join(parts)


def render_tree(tree: BehaviorTree) -> str:
    call = tree.call
    lines = [f"call {call.call_id} {call.server}/{call.tool}"]
    by_parent: dict[str | None, list[ProcessNode]] = {}
    keys = {p.key for p in tree.processes}
    for p in tree.processes:
        by_parent.setdefault(p.parent if p.parent in keys else None, []).append(p)

    def walk(p: ProcessNode, depth: int) -> None:
        pad = "  " * depth
        lines.append(f"{pad}├─ {_head(p)}")
        effects: list[Effect] = [*p.execs, *p.files, *p.net, *p.dns, *p.signals]
        for e in sorted(effects, key=lambda x: x.ts_ns):
            lines.append(f"{pad}│    {_effect(e)}")
        for child in by_parent.get(p.key, []):
            walk(child, depth + 1)

    for root in by_parent.get(None, []):
        walk(root, 0)
    if tree.dns:
        lines.append("dns (unattributed)")
        lines.extend(f"     {_effect(d)}" for d in tree.dns)
    if tree.refused:  # inbound packets the network policy dropped: no process to name
        lines.append("network policy (unattributed)")
        lines.extend(f"     {_effect(n)}" for n in tree.refused)
    if tree.network_policy:
        lines.append("network policy: only " + ", ".join(_safe(n) for n in tree.network_policy))
    if tree.omitted:
        lines.append("omitted as noise: " + ", ".join(f"{k}={v}" for k, v in tree.omitted.items()))
    window_ms = (tree.window_end_ns - tree.window_start_ns) / 1e6
    status = "complete" if tree.complete else "INCOMPLETE: " + "; ".join(tree.incomplete_reasons)
    lines.append(f"window {window_ms:.1f} ms, {status}")
    return "\n".join(lines)
