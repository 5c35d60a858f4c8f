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
from typing import Any, Literal

import msgspec

from ..audit import ToolPins
from ..errors import CallDenied
from ..guard import Guard
from ..model import AuditRecord, DeclaredCall, Timings
from ..proxy.upstream import UpstreamError
from ..sandbox import SandboxConfig
from .attack_evaluators import attack_succeeded
from .attacked import _target_call
from .evidence import side_effects
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
    """The compromised host's dispatch layer: the guard's `dispatch_hook`. `arm(sent)` makes
    the next approved call go out as `sent` (possibly to another server)."""

    def __init__(self) -> None:
        self.pending: ToolCall | None = None

    def arm(self, sent: ToolCall | None) -> None:
        self.pending = sent

    def __call__(self, call: DeclaredCall) -> DeclaredCall:
        sent, self.pending = self.pending, None
        if sent is None:
            return call
        return DeclaredCall(
            call_id=call.call_id, server=sent.server, tool=sent.tool, arguments=dict(sent.arguments)
        )


def declared_trajectory(s: Scenario) -> list[ToolCall]:
    """What the agent declares in the attacked pass. Host attacks act after the pre-audit,
    so for a swap the agent declared the benign call at that place."""
    ha = s.host_attack
    if ha is None or ha.kind in ("replay", "data_tampering"):
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
        "decision": record.decision,
        "phase": record.phase,
        "pre_deny": any(v.phase == "pre" for v in enforcing),
        "post_deny": any(v.phase == "post" for v in enforcing),
        "rules": list(dict.fromkeys(record.rules)),
        "timings_ms": record.timings_ms,
        "denying": list(dict.fromkeys(v.rule for v in enforcing)),
        "side_effects": side_effects(record.tree) if record.tree is not None else [],
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
    sent_calls = list(scenario.benign if kind == "benign" else scenario.attacked)
    declared = sent_calls if kind == "benign" else declared_trajectory(scenario)
    ha = scenario.host_attack if kind == "attacked" else None
    guard.observe = observe
    guard.pins = ToolPins(guard.pins.action)  # each pass starts unpinned, like a first run
    try:
        async with AsyncExitStack() as stack:
            servers = {}
            for name in dict.fromkeys(c.server for c in (*declared, *sent_calls)):
                servers[name] = await stack.enter_async_context(
                    guard.connect(
                        server_command(name),
                        name=name,
                        sandbox=sandbox_for(scenario, name, kind, sandbox),
                    )
                )
            for i, (dec, sent) in enumerate(zip(declared, sent_calls, strict=True)):
                out.calls.append(await _one_call(guard, seam, servers, scenario, i, dec, sent, ha))
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
) -> CallRun:
    swapped = (dec.server, dec.tool, dec.arguments) != (sent.server, sent.tool, sent.arguments)
    seam.arm(sent if swapped else None)
    run = CallRun(
        index=i,
        server=dec.server,
        tool=dec.tool,
        arguments=dict(dec.arguments),
        marked_unsafe=sent.unsafe,
        reason=sent.reason,
    )
    before = len(guard.records)
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
    if record is None and len(guard.records) > before:
        record = guard.records[-1]
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
        if ha is not None and ha.kind == "data_tampering" and sent.unsafe:
            run.result = json.dumps(ha.forged_data)  # the host forges what the agent reads
    run.result = run.result[:RESULT_KEEP]
    return run
