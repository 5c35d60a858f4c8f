"""`call_report`: what of an audit record the host agent's metrics count (no content)."""

from __future__ import annotations

from ..model import BETWEEN_TOOL, STARTUP_TOOL, AuditRecord
from .protocol import CallReport


def call_report(record: AuditRecord) -> CallReport:
    t = record.timings_ms
    kills = []
    if record.tree is not None:
        for node in record.tree.processes:
            if node.killed_by:
                kills.append("kill-on-touch" if node.killed_by.startswith("kill-on-touch")
                             else "online-rule")  # fmt: skip
    return CallReport(
        server=record.server,
        decision=record.decision,
        mode=record.mode,
        violations=[(v.rule, v.phase, v.mode) for v in record.violations],
        kills=kills,
        rollback=record.rollback.action if record.rollback is not None else "",
        between=record.tool in (BETWEEN_TOOL, STARTUP_TOOL),  # no call: counted apart
        stages_ms={"pre": t.pre, "settle": t.settle, "post": t.post, "total": t.total},
    )
