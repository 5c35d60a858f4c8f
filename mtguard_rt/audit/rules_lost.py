"""`lost-events`: fail closed when the monitor lost this sandbox's records in a call's window.

The ring buffer is bounded: a burst bigger than it (a flood, by design or by accident) sheds
records, and what was shed may be the exec, the writing open or the connect that matters.
The kernel counts each lost record per cgroup and kind, a writing open apart
(`BehaviorTree.lost`, monitor.bpf.c `count_lost`), so another sandbox's flood does not count
against this call. Deny when a kind of the rule's `kinds` list (`LostEventsSpec`: exec,
open_write, connect, sends, renames, links, ...) lost any record, or the window's own event
limit was reached (`window_overflow`): the tree cannot show the call harmless. Lost reads
(`open`) are not in the default list: what a read returns is judged in the result. A record
of no call (between calls, the start-up: between.py cuts carry their losses too) has no
result to judge: there a lost read denies as well (a secret read between calls, unseen, would
be handed over by a later call), and in enforce the supervisor quarantines the server.
`incomplete-tree` stays the observe-mode report of every loss (the whole monitor's `drops`).
"""

from __future__ import annotations

from typing import Any

from ..model import BETWEEN_TOOL, STARTUP_TOOL, Violation
from .context import CallContext
from .policy import Policy
from .rules_pre import violation
from .treeview import TreeView

RULE = "lost-events"
WHY = (
    "the monitor lost records of this call that could hide an effect (the ring buffer "
    "overflowed): the tree cannot show the call harmless"
)
WHY_BETWEEN = (
    "the monitor lost records of this sandbox while no call was in flight (the ring buffer "
    "overflowed): what the server did between calls cannot be shown harmless"
)
NO_CALL = frozenset({BETWEEN_TOOL, STARTUP_TOOL})  # records of no call: no result to judge


def lost_events(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    tree = view.tree
    kinds = set(policy.spec.rules.lost_events.kinds)
    between = ctx.call.tool in NO_CALL
    if between:
        kinds.add("open")  # no result to judge what a lost read returned
    lost = {k: n for k, n in tree.lost.items() if k in kinds and n > 0}
    overflow = tree.drops.get("window_overflow", 0)
    if overflow and "window_overflow" in kinds:
        lost["window_overflow"] = overflow
    if not lost:
        return []
    ev = [f"{kind}: {n} records lost" for kind, n in sorted(lost.items())]
    return [violation(RULE, policy, "post", WHY_BETWEEN if between else WHY, ev)]
