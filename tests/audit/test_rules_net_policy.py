"""unexpected-network under a kernel-enforced allowlist (`tree.network_policy`, `refused`)."""

from __future__ import annotations

from typing import Any

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.rules_net import unexpected_network
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, DnsEvent, NetEvent, Violation

from .trees import ctx_for, server_tree

POLICY = load_policy()
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}
TOOL, ARGS = "search_packages", {"query": "left-pad"}


def run(tree: BehaviorTree, arguments: dict[str, Any] = ARGS) -> list[Violation]:
    ctx = ctx_for(TOOL, arguments, task="find a padding library")
    tree.call = ctx.call
    return unexpected_network(ctx, TreeView.build(tree, POLICY, ctx.canaries), RESULT, POLICY)


def tree_with(*net: NetEvent, policy: list[str] | None = None) -> BehaviorTree:
    tree = server_tree(ctx_for(TOOL, ARGS).call)
    tree.processes[0].net.extend(net)
    tree.network_policy = list(policy or [])
    return tree


def connect(address: str, port: int = 443, **kw: Any) -> NetEvent:
    return NetEvent(ts_ns=5, op="connect", family="ipv4", address=address, port=port, **kw)


def test_a_connection_the_kernel_let_through_is_derived_by_construction() -> None:
    # resolved before the call (a client made at start-up): no DNS in this call's tree
    allowed = connect("104.16.0.35", transport="tcp")
    assert run(tree_with(allowed, policy=["registry.npmjs.org"])) == []
    [v] = run(tree_with(connect("104.16.0.35", transport="tcp")))  # no policy: not derived
    assert v.mode == "enforce" and v.evidence == [
        "pid 100 /usr/bin/python3.11 connected to 104.16.0.35:443 (tcp)"
    ]


def test_a_refused_connection_nobody_asked_for_is_denied_with_the_policy_named() -> None:
    refused = connect("203.0.113.9", transport="tcp", result=-1, refused=1)
    [v] = run(tree_with(refused, policy=["registry.npmjs.org"]))
    assert (v.rule, v.mode) == ("unexpected-network", "enforce")
    assert v.evidence == [
        "pid 100 /usr/bin/python3.11 connect to 203.0.113.9:443 (tcp) refused by network policy"
    ]


def test_a_refused_connection_the_arguments_named_is_recorded_not_denied() -> None:
    refused = connect("203.0.113.9", port=8080, transport="tcp", result=-1, refused=1)
    tree = tree_with(refused, policy=["registry.npmjs.org"])
    [v] = run(tree, {"url": "http://203.0.113.9:8080/x"})
    assert v.mode == "observe" and "refused by network policy" in v.reason
    assert v.evidence == [
        "pid 100 /usr/bin/python3.11 connect to 203.0.113.9:8080 (tcp) refused by network policy"
    ]


def test_lookups_under_the_allowlist_pass_others_are_evidence() -> None:
    tree = tree_with(policy=["npmjs.org"])
    srv = tree.processes[0]
    srv.dns.append(DnsEvent(ts_ns=1, direction="query", name="registry.npmjs.org"))
    srv.dns.append(DnsEvent(ts_ns=2, direction="query", name="telemetry.example.net"))
    [v] = run(tree)
    assert v.evidence == ["pid 100 /usr/bin/python3.11 looked up telemetry.example.net (A)"]


def test_a_refused_datagram_reads_as_a_send() -> None:
    sent = NetEvent(
        ts_ns=5, op="send", family="ipv6", address="2001:db8::1", port=9999,
        transport="udp", result=-1, refused=3,
    )  # fmt: skip
    [v] = run(tree_with(sent, policy=["registry.npmjs.org"]))
    assert v.evidence == [
        "pid 100 /usr/bin/python3.11 send to 2001:db8::1:9999 (udp) refused by network policy"
    ]


def test_online_rule_leaves_a_policed_sandbox_to_the_kernel_and_the_post_rule() -> None:
    from mtguard_rt.audit.online import OnlineRules
    from mtguard_rt.model import ProcessNode

    server = ProcessNode(key="100@1", pid=100, exe="/usr/bin/node", learned="seeded")
    event = connect("104.16.0.35", transport="tcp")  # resolved at start-up: no name in the call
    fresh = OnlineRules(POLICY, ctx_for(TOOL, ARGS))
    assert fresh.check(server, event) is not None  # unpoliced: killed online, as before
    policed = OnlineRules(POLICY, ctx_for(TOOL, ARGS))
    policed.network_policy = True
    assert policed.check(server, event) is None  # let through by the kernel: derived
    refused = connect("203.0.113.9", transport="tcp", result=-1, refused=1)
    assert OnlineRules(POLICY, ctx_for(TOOL, ARGS)).check(server, refused) is None  # stopped


def test_viewers_say_refused() -> None:
    once = connect("203.0.113.9", transport="tcp", result=-1, refused=1)
    assert once.summary == "connect tcp 203.0.113.9:443, refused by network policy"
    sent = NetEvent(
        ts_ns=1, op="send", family="ipv6", address="2001:db8::1", port=53, transport="udp",
        result=-1, refused=4,
    )  # fmt: skip
    assert sent.summary == "send udp [2001:db8::1]:53, refused by network policy (4 times)"


def test_trace_rendering_names_the_policy_and_unattributed_refusals() -> None:
    from mtguard_rt.monitor.render import render_tree

    inbound = NetEvent(
        ts_ns=9, op="accept", family="ipv4", address="10.200.7.1", port=41000,
        transport="tcp", result=-1, refused=2,
    )  # fmt: skip
    tree = tree_with(policy=["registry.npmjs.org"])
    tree.refused.append(inbound)
    text = render_tree(tree)
    assert "network policy: only registry.npmjs.org" in text
    assert "accept tcp 10.200.7.1:41000, refused by network policy (2 times)" in text
