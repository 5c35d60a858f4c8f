"""`Guard.records_since`: the records emitted after a mark, also once `records` is full (a
long eval run used to lose every record after the 1000th: the list's length stopped moving)."""

from __future__ import annotations

from mtguard_rt.audit import PolicyEngine, ToolPins, load_policy
from mtguard_rt.config import GuardConfig
from mtguard_rt.guard import Guard
from mtguard_rt.model import AuditRecord, Timings


def record(n: int) -> AuditRecord:
    return AuditRecord(
        call_id=f"c{n}", server="s", tool="t", arguments={}, decision="allow", phase=None,
        rules=[], reasons=[], mode="enforce", timings_ms=Timings(), tree_complete=True,
        llm_used=False, tree=None,
    )  # fmt: skip


def test_records_since_a_mark_keep_coming_once_the_kept_list_is_full() -> None:
    policy = load_policy()
    guard = Guard(GuardConfig(), PolicyEngine(policy), ToolPins("deny"), None, None, None, None)
    guard.keep_records = 3
    for n in range(5):
        guard.sink(record(n), None, None)
    assert len(guard.records) == 3 and guard.records_total == 5
    mark = guard.records_total
    assert guard.records_since(mark) == []
    guard.sink(record(5), None, None)
    assert [r.call_id for r in guard.records_since(mark)] == ["c5"]  # the length did not move
    guard.sink(record(6), None, None)
    assert [r.call_id for r in guard.records_since(mark)] == ["c5", "c6"]
    assert [r.call_id for r in guard.records_since(0)] == ["c4", "c5", "c6"]  # what is kept
