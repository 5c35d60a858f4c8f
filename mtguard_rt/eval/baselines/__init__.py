"""The Agent-Aegis baselines, replayed on the evaluation's recorded tool-call records.

`apply_baselines(p)` fills each call's `tcg` (Tool Call Governance on the call the agent
declared, in order, fresh state per pass) and `tri` (Tool Result Inspection on the text the
agent received) with the reason they fire, or leaves them empty.
"""

from __future__ import annotations

from ..replay import PassRun
from .tcg import ToolCallGovernance
from .tri import inspect_result

__all__ = ["ToolCallGovernance", "apply_baselines", "inspect_result"]


def apply_baselines(p: PassRun) -> PassRun:
    tcg = ToolCallGovernance()
    for call in p.calls:
        call.tcg = tcg.check(call.tool, call.arguments) or ""
        call.tri = inspect_result(call.result) or "" if call.result else ""
    return p
