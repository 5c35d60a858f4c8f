"""The stdio integrity rules on captured messages (built as the assembler would build them);
the real kernel path is in tests/monitor/test_stdio_integrity.py."""

from __future__ import annotations

from typing import Any

from mtguard_rt.audit import POST_RULES, load_policy
from mtguard_rt.audit.engine import PolicyEngine, PostRule
from mtguard_rt.audit.rules_integrity import (
    DispatchLedger,
    request_mismatch,
    result_tampered,
    stamp_stdio,
    undeclared_request,
)
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import (
    BehaviorTree,
    DeclaredCall,
    StdioCapture,
    StdioMessage,
    Violation,
    call_digest,
    canonical_digest,
)

from .trees import ctx_for, server_tree

POLICY = load_policy()
ARGS = {"ticker": "AAPL", "period": {"start": "2024-01-01", "end": "2024-02-01"}}
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "182.5"}], "isError": False}
RID = "host-7"


def request(tool: str, arguments: Any, rid: Any = RID, truncated: bool = False) -> StdioMessage:
    if truncated:
        return StdioMessage(ts_ns=5, pid=100, digest="raw-sha256:00", size=10, truncated=True)
    return StdioMessage(
        ts_ns=5,
        pid=100,
        method="tools/call",
        id=rid,
        tool=tool,
        arguments=arguments,
        digest=call_digest(tool, arguments),
    )


def response(result: Any, rid: Any = RID, error: bool = False) -> StdioMessage:
    return StdioMessage(ts_ns=9, pid=100, id=rid, digest=canonical_digest(result), error=error)


def tree_with(
    requests: list[StdioMessage],
    responses: list[StdioMessage] | None = None,
    *,
    server: str = "srv",
    lossy: bool = False,
) -> BehaviorTree:
    ctx = ctx_for("get_prices", ARGS)
    tree = server_tree(ctx.call, noise=20)
    tree.stdio = StdioCapture(requests=requests, responses=responses or [], lossy=lossy)
    stamp_stdio(tree, server, RID, answered=True)
    return tree


def run(rule: PostRule, tree: BehaviorTree, result: dict[str, Any] = RESULT) -> list[Violation]:
    ctx = ctx_for("get_prices", ARGS)
    return rule(ctx, TreeView.build(tree, POLICY, ctx.canaries), result, POLICY)


def test_registered_enforcing_by_default() -> None:
    names = [name for name, _ in POST_RULES]
    for rule in ("request-mismatch", "undeclared-request", "result-tampered"):
        assert rule in names and POLICY.mode_of(rule) == "enforce"


def test_the_declared_call_and_its_result_pass_every_rule() -> None:
    reordered = {"period": {"end": "2024-02-01", "start": "2024-01-01"}, "ticker": "AAPL"}
    tree = tree_with([request("get_prices", reordered)], [response(RESULT)])
    assert tree.complete
    verdict = PolicyEngine(POLICY).post_rules(ctx_for("get_prices", ARGS), tree, RESULT)
    assert verdict.decision == "allow", verdict.violations


def test_request_mismatch_names_the_changed_argument_and_tool() -> None:
    swapped = {**ARGS, "ticker": "TSLA", "extra": 1}
    (v,) = run(request_mismatch, tree_with([request("get_prices", swapped)]))
    assert v.mode == "enforce" and v.evidence == [
        "argument 'extra' received 1, not declared",
        'argument \'ticker\': declared "AAPL", received "TSLA"',
    ]
    (v,) = run(request_mismatch, tree_with([request("get_news", ARGS)]))
    assert v.evidence == ["the server read tools/call 'get_news'; declared 'get_prices'"]


def test_request_mismatch_when_another_server_read_the_call() -> None:
    tree = tree_with([request("run_command", {"command": "id"})], server="terminal")
    (v,) = run(request_mismatch, tree)
    assert v.evidence[0].startswith(
        "the call declared for server 'srv' was read by server 'terminal'"
    )
    assert "the server read tools/call 'run_command'; declared 'get_prices'" in v.evidence


def test_undeclared_request_flags_replays_and_injected_calls() -> None:
    own = request("get_prices", ARGS)
    again = request("get_prices", ARGS, rid=f"{RID}~replay-1")
    same_id = request("get_prices", ARGS)  # a replay under the very same id
    other = request("transfer", {"to": "x"}, rid=99)
    (v,) = run(undeclared_request, tree_with([own, again, same_id, other]))
    assert len(v.evidence) == 3
    assert v.evidence[0].endswith("(identical to the declared call: a replay)")
    assert "tools/call 'transfer' (id 99)" in v.evidence[2]
    notification = StdioMessage(ts_ns=1, pid=100, method="notifications/cancelled", digest="d")
    assert run(undeclared_request, tree_with([own, notification])) == []
    earlier = tree_with([own])
    assert earlier.stdio is not None
    listing = StdioMessage(ts_ns=1, pid=100, method="tools/list", id="mtguard-3", digest="d")
    earlier.stdio.between_calls = [listing, request("transfer", {"to": "x"}, rid="h-1")]
    (v,) = run(undeclared_request, earlier)
    assert v.evidence == [
        "pid 100 read tools/call 'transfer' (id 'h-1') while no guarded call was running "
        '(before this call) {"to":"x"}'
    ]


def test_requests_the_guard_sent_for_other_calls_are_declared_when_read_late() -> None:
    """A server reading its stdin late reads earlier calls' requests in this window or
    between calls: the guard sent them (ledger), so they are declared, once each; a second
    read of one send, or a request other than the one declared under that id, is not."""
    ledger = DispatchLedger("srv")

    def sent(call_id: str, rid: str, tool: str, arguments: Any) -> None:
        ledger.sent(
            rid, DeclaredCall(call_id=call_id, server="srv", tool=tool, arguments=arguments)
        )

    sent("c-2", "h-2", "get_news", {"q": "a"})
    sent("c-3", "h-3", "get_news", {"q": "b"})  # the seam swapped it: read as a transfer
    sent("c0", "h-0", "get_news", {"q": "x"})
    sent("c1", RID, "get_prices", ARGS)  # this call (ctx_for's call id)
    late = request("get_news", {"q": "x"}, rid="h-0")
    replayed = request("get_news", {"q": "x"}, rid="h-0")  # one send covers one read
    tree = server_tree(ctx_for("get_prices", ARGS).call, noise=5)
    tree.stdio = StdioCapture(requests=[late, request("get_prices", ARGS), replayed])
    tree.stdio.between_calls = [
        request("get_news", {"q": "a"}, rid="h-2"),
        request("transfer", {"to": "x"}, rid="h-3"),
    ]
    stamp_stdio(tree, "srv", RID, True, ledger)
    assert late.dispatched_by == "c0" and tree.stdio.between_calls[0].dispatched_by == "c-2"
    assert tree.stdio.requests[1].dispatched_by == "c1" and replayed.dispatched_by is None
    assert run(request_mismatch, tree) == []
    (v,) = run(undeclared_request, tree)
    assert len(v.evidence) == 2, v.evidence
    assert "tools/call 'get_news' (id 'h-0')" in v.evidence[0]
    assert "tools/call 'transfer' (id 'h-3') while no guarded call" in v.evidence[1]


def test_result_tampered_compares_canonically() -> None:
    wrote = response({"isError": False, "content": [{"text": "182.5", "type": "text"}]})
    assert run(result_tampered, tree_with([request("get_prices", ARGS)], [wrote])) == []
    forged = {"content": [{"type": "text", "text": '{"price": 1.0}'}]}
    (v,) = run(result_tampered, tree_with([request("get_prices", ARGS)], [wrote]), forged)
    assert v.evidence[0].startswith(f"the server wrote result {wrote.digest}")
    error = response({"code": -1, "message": "no"}, error=True)
    assert run(result_tampered, tree_with([], [error]), {}) == []
    (v,) = run(result_tampered, tree_with([], [error]), forged)
    assert "answered with an error" in v.evidence[0]


def test_missing_or_partial_evidence_never_denies() -> None:
    forged = {"content": [{"type": "text", "text": "forged"}]}
    partial = tree_with([request("", None, truncated=True)], [])
    assert not partial.complete and any("not seen" in r for r in partial.incomplete_reasons)
    lossy = tree_with(
        [request("get_news", ARGS), request("x", {}, rid=5)], [response({})], lossy=True
    )
    unstamped = server_tree(ctx_for("get_prices", ARGS).call, noise=5)
    unstamped.stdio = StdioCapture(requests=[request("get_news", ARGS)])
    for tree in (partial, lossy, unstamped, server_tree(ctx_for("x", {}).call, noise=5)):
        for rule in (request_mismatch, undeclared_request, result_tampered):
            assert run(rule, tree, forged) == [], (rule, tree.stdio)


def test_an_id_the_server_cannot_echo_does_not_hide_a_swap() -> None:
    """A compromised host choosing an id the capture cannot match (not a JSON-RPC id) still
    has its swapped call compared: the calls read are checked against the declared one."""
    ctx = ctx_for("get_prices", ARGS)
    tree = server_tree(ctx.call, noise=5)
    swapped = request("get_prices", {**ARGS, "ticker": "TSLA"}, rid=None)
    tree.stdio = StdioCapture(requests=[swapped])
    stamp_stdio(tree, "srv", {"not": "an id"}, answered=True)
    (v,) = run(request_mismatch, tree)
    assert "argument 'ticker'" in v.evidence[0] and not tree.complete
    assert run(undeclared_request, tree) == []
    # the declared call read too: it stands for the call, the swapped one is extra
    assert tree.stdio is not None
    tree.stdio.requests.append(request("get_prices", ARGS, rid=None))
    assert run(request_mismatch, tree) == []
    (u,) = run(undeclared_request, tree)
    assert len(u.evidence) == 1 and '"TSLA"' in u.evidence[0]
    honest = server_tree(ctx.call, noise=5)
    honest.stdio = StdioCapture(requests=[request("get_prices", ARGS, rid=2.0)])
    stamp_stdio(honest, "srv", 2.0, answered=True)
    assert honest.complete and run(request_mismatch, honest) == []
