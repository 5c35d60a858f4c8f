"""`lost-events` on recorded trees: this sandbox's lost records of a kind that could hide an
effect deny; lost reads, and the whole monitor's drops (another sandbox's flood), do not."""

from __future__ import annotations

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.context import CallContext
from mtguard_rt.audit.rules_lost import lost_events
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, DeclaredCall

POLICY = load_policy()
CALL = DeclaredCall(call_id="t", server="s", tool="read_file", arguments={"path": "a"})


def judge(**fields: dict[str, int]) -> list[str]:
    tree = BehaviorTree(call=CALL, **fields)  # type: ignore[arg-type]
    found = lost_events(CallContext(call=CALL), TreeView.build(tree, POLICY, {}), {}, POLICY)
    assert all(v.rule == "lost-events" and v.mode == "enforce" for v in found)
    return [e for v in found for e in v.evidence]


def test_own_lost_effects_deny() -> None:
    assert judge(lost={"open_write": 3, "open": 40}) == ["open_write: 3 records lost"]
    assert judge(lost={"exec": 1, "connect": 2}) == [
        "connect: 2 records lost",
        "exec: 1 records lost",
    ]
    assert judge(drops={"window_overflow": 7}) == ["window_overflow: 7 records lost"]


def test_lost_reads_and_other_sandboxes_drops_pass() -> None:
    assert judge(lost={"open": 500, "close": 500}) == []
    assert judge(drops={"exec": 9, "open": 1000}) == []  # the monitor's, not this sandbox's
    assert judge() == []
