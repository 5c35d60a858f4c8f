"""Sandbox evidence of links and signals: what the evaluation counts as a side effect."""

from __future__ import annotations

from mtguard_rt.eval.evidence import side_effects, undone_by_rollback
from mtguard_rt.model import (
    BehaviorTree,
    DeclaredCall,
    FileEvent,
    ProcessNode,
    RollbackReport,
    SignalEvent,
)

WS = "/srv/ws"
CALL = DeclaredCall(call_id="c", server="s", tool="t")


def sig(relation: str, signal: int = 9, delivered: int = 1) -> SignalEvent:
    return SignalEvent(ts_ns=5, syscall="kill", signal=signal, name="SIGKILL", target_pid=7,
                       target_argv=["sleep", "600"], relation=relation,  # type: ignore[arg-type]
                       delivered=delivered)  # fmt: skip


def tree(files: list[FileEvent], signals: list[SignalEvent]) -> BehaviorTree:
    server = ProcessNode(key="1@1", pid=1, files=files, signals=signals)
    return BehaviorTree(call=CALL, processes=[server])


RESTORED = RollbackReport(mode="tree", action="restored", workspace=WS)


def test_a_delivered_signal_to_another_process_is_an_effect_no_rollback_undoes() -> None:
    t = tree([], [sig("descendant")])
    assert side_effects(t) == ["signal SIGKILL -> sleep 600"]
    assert not undone_by_rollback(t, RESTORED)
    probes = [sig("self"), sig("sandbox", signal=0, delivered=0), sig("sandbox", delivered=0)]
    quiet = tree([], probes)
    assert side_effects(quiet) == [] and undone_by_rollback(quiet, RESTORED)


def test_a_link_in_the_workspace_is_undone_whatever_it_points_at() -> None:
    link = FileEvent(ts_ns=3, op="symlink", path=f"{WS}/escape", target="../../etc/passwd")
    t = tree([link], [])
    assert side_effects(t) == [f"symlink {WS}/escape -> ../../etc/passwd"]
    assert undone_by_rollback(t, RESTORED)  # the rollback removes the name it made
    outside = FileEvent(ts_ns=3, op="link", path="/home/u/x", target=f"{WS}/a")
    assert not undone_by_rollback(tree([outside], []), RESTORED)
