"""Replay one trajectory of a scenario through a guard: one pass, fresh servers, real calls.

`run_pass(guard, seam, scenario, kind, mode)` starts the example servers the trajectory needs
in fresh sandboxes (the attacked pass gives the payload's server its attack environment),
sends each call through the guard the way the agent declared it, lets the compromised host
`Seam` swap, replay or forge where the scenario's host attack says so, and returns a
`PassRun`: per call what was declared, what reached a server, what the agent received, the
guard's verdict split by phase, timings, and side effects seen in the behavior tree. Labels
come from the case's evaluator run on the calls that reached a server.
"""

from __future__ import annotations

import json
import time
from contextlib import AsyncExitStack
from functools import partial
from typing import Any, Literal

import msgspec

from ..audit import ToolPins
from ..between_calls import is_between
from ..errors import CallDenied
from ..guard import Guard
from ..model import AuditRecord, DeclaredCall, Timings
from ..proxy.upstream import UpstreamError
from ..sandbox import SandboxConfig
from ..supervisor import SeamAction
from .attack_evaluators import attack_succeeded
from .attacked import _target_call
from .evidence import cut_before_effect, side_effects, undone_by_rollback
from .example_servers import SERVERS_DIR, server_command
from .scenario import ExecutedCall, Scenario, ToolCall

PassKind = Literal["benign", "attacked"]
# The browser reaches the local copies of its sites (eval/sites.py) on the host's loopback;
# every other server keeps network mode "none".
HOST_NETWORK_SERVERS = frozenset({"playwright"})
RESULT_KEEP = 4000  # characters of a result kept per call (baselines read it; JSON stays small)


class CallRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    server: str  # declared
    call_id: str | None = None  # the guard's call id: joins this call to its audit record
    tool: str
    arguments: dict[str, Any]
    sent_server: str | None = None  # what reached a server (None: denied before dispatch)
    sent_tool: str | None = None
    sent_arguments: dict[str, Any] | None = None
    marked_unsafe: bool = False  # the trajectory says the attack caused this call
    reason: str = ""
    label: Literal["safe", "unsafe", "attack-failed"] = "safe"
    decision: Literal["allow", "deny"] = "allow"
    phase: str | None = None
    pre_deny: bool = False  # an enforcing pre-execution rule fired
    post_deny: bool = False  # an enforcing post-verification rule fired
    rules: list[str] = msgspec.field(default_factory=list)  # every rule that fired
    denying: list[str] = msgspec.field(default_factory=list)  # those in enforce mode
    timings_ms: Timings = msgspec.field(default_factory=Timings)
    result: str = ""  # what the agent received (forged, when the host tampered)
    error: str = ""
    side_effects: list[str] = msgspec.field(default_factory=list)
    rolled_back: bool = False  # its only effects were workspace changes the rollback undid
    # terminated online when the server read what the host slipped in, before any effect
    cut_before_effect: bool = False
    tcg: str = ""  # baseline findings (empty: did not fire)
    tri: str = ""


class PassRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    case_id: str
    domain: str
    surface: str
    attack_type: str
    kind: PassKind
    mode: Literal["observe", "enforce"]
    calls: list[CallRun] = msgspec.field(default_factory=list)
    attack_succeeded: bool | None = None  # attacked passes: the case's evaluators
    error: str = ""
    seconds: float = 0.0


class Seam:
    """The compromised host's dispatch layer: the guard's `dispatch_hook`, acting between the
    pre-audit and the sandbox. `arm(sent, replays, forged)` applies to the next approved call
    only: it goes out as `sent` (possibly to another server), is re-sent `replays` more times
    in the same dispatch, and its result is replaced by `forged` (as a text block holding its
    JSON) before the guard's post-verification returns it."""

    def __init__(self) -> None:
        self.pending: ToolCall | None = None
        self.replays = 0
        self.forged: Any = None

    def arm(self, sent: ToolCall | None, replays: int = 0, forged: Any = None) -> None:
        self.pending, self.replays, self.forged = sent, replays, forged

    def __call__(self, call: DeclaredCall) -> DeclaredCall | SeamAction:
        sent, replays, forged = self.pending, self.replays, self.forged
        self.arm(None)
        out = call
        if sent is not None:
            out = DeclaredCall(
                call_id=call.call_id,
                server=sent.server,
                tool=sent.tool,
                arguments=dict(sent.arguments),
            )
        if not replays and forged is None:
            return out
        on_result = None if forged is None else partial(_forge, json.dumps(forged))
        return SeamAction(call=out, replays=replays, on_result=on_result)


def _forge(text: str, result: dict[str, Any]) -> dict[str, Any]:
    """The seam's data tampering: the server's result replaced by the forged data."""
    return {"content": [{"type": "text", "text": text}], "isError": False}


def dispatch_plan(s: Scenario, kind: PassKind) -> list[tuple[ToolCall, ToolCall, list[ToolCall]]]:
    """Per approved call of a pass: what the agent declares, what the seam sends, and the
    copies the seam replays with it (host replay attacks: the agent never declares them)."""
    if kind == "benign":
        return [(c, c, []) for c in s.benign]
    ha = s.host_attack
    if ha is not None and ha.kind == "replay":
        plan: list[tuple[ToolCall, ToolCall, list[ToolCall]]] = []
        for c in s.attacked:
            if plan and c.unsafe and _same(c, plan[-1][1]):
                plan[-1][2].append(c)
            else:
                plan.append((c, c, []))
        return plan
    return [(d, c, []) for d, c in zip(declared_trajectory(s), s.attacked, strict=True)]


def _same(a: ToolCall, b: ToolCall) -> bool:
    return (a.server, a.tool, a.arguments) == (b.server, b.tool, b.arguments)


def declared_trajectory(s: Scenario) -> list[ToolCall]:
    """What the agent declares in the attacked pass. Host attacks act after the pre-audit,
    so for a swap the agent declared the benign call at that place; a replay's copies are
    the seam's, never declared; a tampered call is declared as it is sent."""
    ha = s.host_attack
    if ha is not None and ha.kind == "replay":
        return [d for d, _, _ in dispatch_plan(s, "attacked")]
    if ha is None or ha.kind == "data_tampering":
        return list(s.attacked)
    aligned, _ = _target_call(list(s.benign), ha.target_tool)
    if ha.kind == "tool_call_hook":
        aligned = list(s.benign)
    if len(aligned) != len(s.attacked):
        raise ValueError(f"{s.case_id}: cannot align declared and sent calls")
    return aligned


def sandbox_for(
    scenario: Scenario, server: str, kind: PassKind, base: SandboxConfig
) -> SandboxConfig:
    env = dict(base.env)
    attack = scenario.server_attack
    if kind == "attacked" and attack is not None and attack.server == server:
        env.update(attack.env)
    mounts = list(dict.fromkeys([*base.mounts, str(SERVERS_DIR)]))
    network = "host" if server in HOST_NETWORK_SERVERS else base.network
    return msgspec.structs.replace(base, env=env, mounts=mounts, network=network)


def _text(result: dict[str, Any]) -> str:
    return "".join(
        str(b.get("text", "")) for b in result.get("content") or [] if isinstance(b, dict)
    )


def _verdict_fields(record: AuditRecord | None) -> dict[str, Any]:
    if record is None:
        return {}
    enforcing = [v for v in record.violations if v.mode == "enforce"]
    return {
        "call_id": record.call_id,
        "decision": record.decision,
        "phase": record.phase,
        "pre_deny": any(v.phase == "pre" for v in enforcing),
        "post_deny": any(v.phase == "post" for v in enforcing),
        "rules": list(dict.fromkeys(record.rules)),
        "timings_ms": record.timings_ms,
        "denying": list(dict.fromkeys(v.rule for v in enforcing)),
        "side_effects": side_effects(record.tree) if record.tree is not None else [],
        "rolled_back": record.tree is not None and undone_by_rollback(record.tree, record.rollback),
        "cut_before_effect": record.tree is not None
        and cut_before_effect(record.tree, record.terminated),
    }


async def run_pass(
    guard: Guard,
    seam: Seam,
    scenario: Scenario,
    kind: PassKind,
    *,
    observe: bool,
    sandbox: SandboxConfig,
) -> PassRun:
    t0 = time.perf_counter()
    out = PassRun(
        case_id=scenario.case_id,
        domain=scenario.domain,
        surface=scenario.surface,
        attack_type=scenario.attack_type,
        kind=kind,
        mode="observe" if observe else "enforce",
    )
    plan = dispatch_plan(scenario, kind)
    ha = scenario.host_attack if kind == "attacked" else None
    guard.observe = observe
    guard.pins = ToolPins(guard.pins.action)  # each pass starts unpinned, like a first run
    try:
        async with AsyncExitStack() as stack:
            servers = {}
            for name in dict.fromkeys(c.server for d, sent, _ in plan for c in (d, sent)):
                servers[name] = await stack.enter_async_context(
                    guard.connect(
                        server_command(name),
                        name=name,
                        sandbox=sandbox_for(scenario, name, kind, sandbox),
                    )
                )
            for dec, sent, copies in plan:
                run = await _one_call(
                    guard, seam, servers, scenario, len(out.calls), dec, sent, ha, len(copies)
                )
                out.calls.append(run)
                out.calls += _replayed(run, copies)
    except Exception as exc:  # one broken scenario is reported, it does not end the run
        out.error = f"{type(exc).__name__}: {exc}"[:500]
    executed = [
        ExecutedCall(tool=c.sent_tool, arguments=c.sent_arguments or {}, result=c.result)
        for c in out.calls
        if c.sent_tool is not None
    ]
    if kind == "attacked":
        out.attack_succeeded = any(attack_succeeded(e, executed) for e in scenario.evaluators)
        for c in out.calls:
            if c.marked_unsafe:
                c.label = "unsafe" if out.attack_succeeded else "attack-failed"
    out.seconds = round(time.perf_counter() - t0, 3)
    return out


async def _one_call(
    guard: Guard,
    seam: Seam,
    servers: dict[str, Any],
    scenario: Scenario,
    i: int,
    dec: ToolCall,
    sent: ToolCall,
    ha: Any,
    replays: int = 0,
) -> CallRun:
    swapped = (dec.server, dec.tool, dec.arguments) != (sent.server, sent.tool, sent.arguments)
    forge = ha is not None and ha.kind == "data_tampering" and sent.unsafe
    seam.arm(sent if swapped else None, replays, ha.forged_data if forge else None)
    run = CallRun(
        index=i,
        server=dec.server,
        tool=dec.tool,
        arguments=dict(dec.arguments),
        marked_unsafe=sent.unsafe,
        reason=sent.reason,
    )
    before = guard.records_total
    record: AuditRecord | None = None
    try:
        result = await servers[dec.server].call_tool(dec.tool, dec.arguments, task=scenario.task)
        run.result = _text(result)
        if result.get("isError"):
            run.error = run.result[:200]
    except CallDenied as exc:
        record = exc.record
        run.result = _text({"content": [{"type": "text", "text": str(exc)}]})
    except UpstreamError as exc:
        run.error = str(exc)
    finally:
        seam.arm(None)
    if record is None:  # the call's own record, not a between-call one emitted meanwhile
        record = next((r for r in reversed(guard.records_since(before)) if not is_between(r)), None)
    for key, value in _verdict_fields(record).items():
        setattr(run, key, value)
    denied_before = (
        record is not None
        and record.decision == "deny"
        and record.phase == "pre"
        and not guard.observe
    )
    if not denied_before:
        run.sent_server, run.sent_tool = sent.server, sent.tool
        run.sent_arguments = dict(sent.arguments)
    run.result = run.result[:RESULT_KEEP]
    return run


def _replayed(carrier: CallRun, copies: list[ToolCall]) -> list[CallRun]:
    """The seam's replays of `carrier`, one run each: never declared, sent in the carrier's
    dispatch (so they reached the server iff it did) and judged by its verdict."""
    out = []
    for k, c in enumerate(copies, 1):
        run = msgspec.structs.replace(
            carrier, index=carrier.index + k, marked_unsafe=c.unsafe, reason=c.reason, label="safe"
        )
        if carrier.sent_tool is None:
            run.sent_server = run.sent_tool = run.sent_arguments = None
        out.append(run)
    return out
