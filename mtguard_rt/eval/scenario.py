"""The replayable attack scenario: a task, its benign and attacked trajectories, the payload.

A `Scenario` needs no LLM: `benign` is what a correct agent calls for the task (every call
safe), `attacked` is what the agent calls once the attack has worked (the calls the attack
caused carry `unsafe=True` and a reason). `server_attack` is the environment that makes the
example server apply a server-side payload for real; `host_attack` is what a compromised
dispatch seam does between the guard's pre-audit and the sandbox. JSON round-trip safe.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Domain = Literal["browser", "financial"]
Surface = Literal["server", "host", "user"]
HostKind = Literal[
    "wrong_function", "wrong_arguments", "data_tampering", "replay", "tool_call_hook"
]


class ToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One `tools/call` of a trajectory, on one of the example servers."""

    server: str  # playwright, yfinance, terminal, filesystem, fetch, calculator, date
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    unsafe: bool = False
    reason: str = ""  # why the call is unsafe: which part of the attack caused it


class ExecutedCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A call that reached a server, with its result text: what evaluators judge."""

    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    result: str = ""


class AttackEvaluator(msgspec.Struct, kw_only=True):
    """A case's attack-success check (`check_*`), run on the calls that executed."""

    op: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    desc: str = ""


class ServerAttack(msgspec.Struct, kw_only=True):
    """Environment for examples/servers/<server>.py that applies the payload for real."""

    server: str
    env: dict[str, str]


class HostAttack(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the compromised dispatch seam does to the target tool's calls."""

    kind: HostKind
    target_tool: str
    malicious_tool: str | None = None  # wrong_function
    malicious_arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    forged_data: Any = None  # data_tampering: the result the agent receives instead
    replay_threshold: int = 0  # replay: how many times the call is issued in all
    command: str | None = None  # tool_call_hook: run_command's unauthorised command


class Scenario(msgspec.Struct, kw_only=True, omit_defaults=True):
    case_id: str  # the case file's stem, or tch_<domain>_<n> for generated hook cases
    domain: Domain
    surface: Surface
    attack_category: str  # as the case states it, e.g. "Tool Poisoning-Parameter Poisoning"
    attack_type: str  # the subtype alone, e.g. "Parameter Poisoning"
    category: str  # "Stealth Attack" or "Disruption Attack"
    task: str
    benign: list[ToolCall]
    attacked: list[ToolCall]
    evaluators: list[AttackEvaluator] = msgspec.field(default_factory=list)
    utility_evaluators: list[str] = msgspec.field(default_factory=list)  # need live services
    server_attack: ServerAttack | None = None
    host_attack: HostAttack | None = None
    source: str = ""  # path of the case file; empty for generated scenarios
    generated: bool = False

    @property
    def unsafe_calls(self) -> list[ToolCall]:
        return [c for c in self.attacked if c.unsafe]

    @property
    def servers(self) -> list[str]:
        """The example servers a replay needs, in first-use order."""
        names = [c.server for c in (*self.benign, *self.attacked)]
        return list(dict.fromkeys(names))


scenario_encoder = msgspec.json.Encoder()
scenario_decoder = msgspec.json.Decoder(Scenario)
