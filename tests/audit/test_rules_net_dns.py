"""unexpected-network on lookups: a name looked up with no connection after it and no data of
the call in it (a library's telemetry) is recorded, not denied; a name that can carry data
(long, high-entropy, hex or encoded labels, an argument's text, many names under one
parent), a lookup in a call that read a secret, or a connection to its answer is denied.
Hosts the arguments name derive egress only from destination arguments, not from prose."""

from __future__ import annotations

from typing import Any

from mtguard_rt.audit import CallContext, PolicyEngine, load_policy
from mtguard_rt.audit.engine import PostRule
from mtguard_rt.audit.rules_net import unexpected_network
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, DnsEvent, NetEvent, Violation

from .trees import HOME, child, ctx_for, opened, server_tree

POLICY = load_policy()
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}
TELEMETRY = "mobile.events.data.vendor-telemetry.com"


def run(rule: PostRule, ctx: CallContext, tree: BehaviorTree) -> list[Violation]:
    return rule(ctx, TreeView.build(tree, POLICY, ctx.canaries), RESULT, POLICY)


def lookup(tree: BehaviorTree, *names: str, answers: list[str] | None = None) -> None:
    srv = tree.processes[0]
    for i, name in enumerate(names):
        srv.dns.append(DnsEvent(ts_ns=10 + i, direction="query", name=name))
        srv.dns.append(DnsEvent(ts_ns=10 + i, direction="query", name=name, qtype="AAAA"))
        srv.dns.append(
            DnsEvent(ts_ns=20 + i, direction="response", name=name, answers=answers or [])
        )


def convert() -> CallContext:
    return ctx_for("convert_to_markdown", {"uri": "file:///workspace/docs/notes.txt"})


def test_a_lookup_alone_carrying_no_data_is_recorded_not_denied() -> None:
    ctx = convert()
    tree = server_tree(ctx.call)
    lookup(tree, TELEMETRY)
    [v] = run(unexpected_network, ctx, tree)
    assert v.mode == "observe"
    assert v.evidence == [f"pid 100 /usr/bin/python3.11 looked up {TELEMETRY} (A)"]
    verdict = PolicyEngine(POLICY).post_rules(ctx, tree, RESULT)
    assert verdict.decision == "allow"


def test_a_connection_to_the_lookups_answer_is_egress() -> None:
    ctx = convert()
    tree = server_tree(ctx.call)
    lookup(tree, TELEMETRY, answers=["203.0.113.7"])
    tree.processes[0].net.append(
        NetEvent(ts_ns=30, op="connect", family="ipv4", address="203.0.113.7", port=443)
    )
    [v] = run(unexpected_network, ctx, tree)
    assert v.mode == "enforce" and len(v.evidence) == 2


def test_a_lookup_in_a_call_that_read_a_secret_is_denied() -> None:
    ctx = convert()
    tree = server_tree(ctx.call)
    lookup(tree, TELEMETRY)
    child(tree, 42, ["cat"], files=[opened(f"{HOME}/.docker/config.json")])
    [v] = run(unexpected_network, ctx, tree)
    assert v.mode == "enforce" and "the call also read" in v.evidence[0]


def test_names_that_can_carry_data_are_denied() -> None:
    ctx = ctx_for("get_weather", {"city": "Reykjavik-harbour"})
    cases = {
        "a2V5LXZhbHVl.attacker.example": "decodes to text",  # base64, case as sent
        "4f3a9c2e17b0d5aa.attacker.example": "is hex",
        "q8zk3jv0xw7ntm2p5rhy.attacker.example": "high in entropy",
        "reykjavik-harbour.attacker.example": "repeats an argument",
        "x" * 30 + ".attacker.example": "30 characters",
    }
    for name, why in cases.items():
        tree = server_tree(ctx.call)
        lookup(tree, name)
        [v] = run(unexpected_network, ctx, tree)
        assert v.mode == "enforce" and why in v.evidence[0], (name, v.evidence)
    split = server_tree(ctx.call)
    lookup(split, "abc.attacker.example", "def.attacker.example", "ghi.attacker.example")
    [v] = run(unexpected_network, ctx, split)
    assert v.mode == "enforce" and "3 names looked up under attacker.example" in v.evidence[0]


def test_ordinary_host_words_are_not_read_as_data() -> None:
    ctx = convert()
    for name in (
        "mobile.events.data.microsoft.com",
        "registry.npmjs.org",
        "files.pythonhosted.org",
        "fonts.googleapis.com",
        "security.debian.org",
    ):
        tree = server_tree(ctx.call)
        lookup(tree, name)
        [v] = run(unexpected_network, ctx, tree)
        assert v.mode == "observe", (name, v.evidence)


def test_a_url_in_prose_does_not_derive_egress_but_a_url_argument_does() -> None:
    prose = {"text": "Our status page moved to https://status.example-shop.test/now"}
    ctx = ctx_for("save_note", prose, task="Save a note about the status page")
    tree = server_tree(ctx.call)
    lookup(tree, "status.example-shop.test", answers=["198.51.100.4"])
    tree.processes[0].net.append(
        NetEvent(ts_ns=30, op="connect", family="ipv4", address="198.51.100.4", port=443)
    )
    [v] = run(unexpected_network, ctx, tree)
    assert v.mode == "enforce" and any("198.51.100.4:443" in e for e in v.evidence)
    fetch = ctx_for(
        "fetch", {"url": "https://status.example-shop.test/now"}, task="Fetch the status page"
    )
    tree = server_tree(fetch.call)
    lookup(tree, "status.example-shop.test", answers=["198.51.100.4"])
    tree.processes[0].net.append(
        NetEvent(ts_ns=30, op="connect", family="ipv4", address="198.51.100.4", port=443)
    )
    assert run(unexpected_network, fetch, tree) == []
