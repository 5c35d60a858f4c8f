"""The evaluation's compromised host seam acts between the pre-audit and the sandbox: swaps,
replays (never declared by the agent) and result forgery all go through `dispatch_hook`."""

from __future__ import annotations

import json

import pytest

from mtguard_rt.eval.corpus import load_scenarios
from mtguard_rt.eval.replay import Seam, declared_trajectory, dispatch_plan
from mtguard_rt.eval.scenario import HostAttack, Scenario, ToolCall
from mtguard_rt.model import DeclaredCall
from mtguard_rt.supervisor import SeamAction

CALL = DeclaredCall(call_id="1", server="yfinance", tool="get_price", arguments={"t": "A"})


def _scenario(kind: str, attacked: list[ToolCall], **ha: object) -> Scenario:
    benign = [c for c in attacked if not c.unsafe]
    return Scenario(
        case_id="x",
        domain="financial",
        surface="host",
        attack_category="c",
        attack_type="t",
        category="Stealth Attack",
        task="t",
        benign=benign,
        attacked=attacked,
        host_attack=HostAttack(kind=kind, target_tool="get_price", **ha),  # type: ignore[arg-type]
    )


def test_replay_copies_are_the_seams_not_the_agents() -> None:
    first = ToolCall(server="yfinance", tool="get_price", arguments={"t": "A"})
    copy = ToolCall(server="yfinance", tool="get_price", arguments={"t": "A"}, unsafe=True)
    news = ToolCall(server="yfinance", tool="get_news", arguments={"t": "A"})
    s = _scenario("replay", [first, copy, copy, news], replay_threshold=3)
    plan = dispatch_plan(s, "attacked")
    assert [(d.tool, len(copies)) for d, _, copies in plan] == [("get_price", 2), ("get_news", 0)]
    assert declared_trajectory(s) == [first, news]
    assert [len(c) for _, _, c in dispatch_plan(s, "benign")] == [0, 0]


def test_seam_returns_a_plain_swap_or_an_action_once() -> None:
    seam = Seam()
    assert seam(CALL) is CALL
    seam.arm(ToolCall(server="terminal", tool="run_command", arguments={"command": "id"}))
    out = seam(CALL)
    assert isinstance(out, DeclaredCall) and (out.server, out.tool) == ("terminal", "run_command")
    seam.arm(None, replays=2)
    action = seam(CALL)
    assert isinstance(action, SeamAction) and action.call is CALL and action.replays == 2
    seam.arm(None, forged={"price": 1})
    action = seam(CALL)
    assert isinstance(action, SeamAction) and action.on_result is not None
    forged = action.on_result({"content": [{"type": "text", "text": "182.5"}]})
    assert json.loads(forged["content"][0]["text"]) == {"price": 1}
    assert seam(CALL) is CALL  # disarmed after one call


@pytest.mark.corpus
def test_corpus_replays_and_tampering_are_dispatched_by_the_seam() -> None:
    by_id = {s.case_id: s for s in load_scenarios()}
    replays = [s for s in by_id.values() if s.host_attack and s.host_attack.kind == "replay"]
    assert replays
    for s in replays:
        plan = dispatch_plan(s, "attacked")
        assert sum(len(c) for _, _, c in plan) == sum(c.unsafe for c in s.attacked)
        assert not any(d.unsafe for d in declared_trajectory(s))
    tampered = [
        s for s in by_id.values() if s.host_attack and s.host_attack.kind == "data_tampering"
    ]
    for s in tampered:
        assert declared_trajectory(s) == s.attacked
