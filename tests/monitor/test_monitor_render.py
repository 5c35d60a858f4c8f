"""The text tree of `mtguard trace`."""

from __future__ import annotations

from test_monitor_replay import tree_of

from mtguard_rt.model import BehaviorTree, DeclaredCall, DnsEvent, FileEvent, ProcessNode
from mtguard_rt.monitor.render import render_tree


def test_render_nests_children_and_shows_effects() -> None:
    out = render_tree(tree_of("exec_tree")).splitlines()
    assert out[0].startswith("call t1 test/run")
    sh = next(i for i, line in enumerate(out) if line.startswith("├─ ") and "(seeded)" in line)
    echo = next(
        i
        for i, line in enumerate(out)
        if line.startswith("  ├─ ") and "] /bin/echo one two" in line
    )
    assert echo > sh
    assert any("exec /nonexistent/tool: /nonexistent/tool a b  -> error 2" in x for x in out)
    assert out[-1].endswith("complete")


def test_control_characters_cannot_forge_lines() -> None:
    node = ProcessNode(
        key="1@1",
        pid=1,
        argv=["evil\n├─ [2] fake"],
        files=[FileEvent(ts_ns=1, op="open", path="/tmp/a\nb", flags=["read"])],
    )
    tree = BehaviorTree(
        call=DeclaredCall(call_id="c", server="s", tool="t"),
        processes=[node],
        dns=[DnsEvent(ts_ns=2, direction="query", name="x\ny")],
        complete=False,
        incomplete_reasons=["ring buffer full"],
    )
    out = render_tree(tree)
    assert len(out.splitlines()) == 6
    assert "evil\\n" in out and "/tmp/a\\nb" in out and "INCOMPLETE: ring buffer full" in out
