"""The data every layer shares: the declared call, the tool behavior tree, the verdict.

Plain msgspec structs, JSON round-trip safe. The monitor builds trees, the audit reads them
and produces verdicts, telemetry exports both; none of them owns these types. Processes are
stored flat with a `parent` key (the observed edges), so rules can scan them without
recursion and the JSON stays shallow. Kernel times are `CLOCK_MONOTONIC` ns (`*_ns`);
`BehaviorTree.wall_offset_ns` maps them to Unix time.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

FileOp = Literal["open", "unlink", "rename", "mkdir", "rmdir", "chmod", "chdir"]
Decision = Literal["allow", "deny"]
Phase = Literal["pre", "post"]
Mode = Literal["enforce", "observe", "off"]


class DeclaredCall(msgspec.Struct, kw_only=True):
    """A `tools/call` as the agent declared it (what the pre-audit judged)."""

    call_id: str
    server: str
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class FileEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    ts_ns: int
    op: FileOp
    path: str  # absolute when `resolved`, else the raw name as the process passed it
    resolved: bool = True
    target: str | None = None  # rename destination
    flags: list[str] = msgspec.field(default_factory=list)  # read, write, create, truncate
    mode: int | None = None  # chmod/mkdir/creat mode bits
    result: int = 0  # syscall return value: fd or 0 on success, -errno on failure


class NetEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    ts_ns: int
    op: Literal["connect", "accept"]
    family: Literal["ipv4", "ipv6"]
    address: str
    port: int
    result: int = 0


class DnsEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    ts_ns: int
    direction: Literal["query", "response"]
    name: str
    qtype: str = "A"
    answers: list[str] = msgspec.field(default_factory=list)
    server: str | None = None  # resolver address:port
    pid: int | None = None  # set when attributed


class ExecEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    ts_ns: int
    path: str
    argv: list[str] = msgspec.field(default_factory=list)
    argv_truncated: bool = False
    argv_len: int = 0  # full byte length of the argument vector as the kernel saw it
    result: int = 0  # 0 on success, -errno when the exec failed


class ProcessNode(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One process (identity: pid + start time, so pid reuse cannot merge two)."""

    key: str  # f"{pid}@{start_ns}"
    pid: int
    ppid: int = 0
    parent: str | None = None  # key of the parent process when it is in the tree
    exe: str = ""
    argv: list[str] = msgspec.field(default_factory=list)
    argv_truncated: bool = False
    cwd: str | None = None
    uid: int | None = None
    start_ns: int = 0
    end_ns: int | None = None
    exit_code: int | None = None
    learned: Literal["observed", "seeded"] = "observed"
    still_running: bool = False
    killed_by: str | None = None  # the online rule on whose deny mtguard SIGKILLed it
    execs: list[ExecEvent] = msgspec.field(default_factory=list)
    files: list[FileEvent] = msgspec.field(default_factory=list)
    net: list[NetEvent] = msgspec.field(default_factory=list)
    dns: list[DnsEvent] = msgspec.field(default_factory=list)

    @property
    def command_line(self) -> str:
        return " ".join(self.argv) if self.argv else self.exe


class BehaviorTree(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Root = declared call; process branch (flat, `parent` edges); unattributed DNS."""

    call: DeclaredCall
    processes: list[ProcessNode] = msgspec.field(default_factory=list)
    dns: list[DnsEvent] = msgspec.field(default_factory=list)
    complete: bool = True
    incomplete_reasons: list[str] = msgspec.field(default_factory=list)
    drops: dict[str, int] = msgspec.field(default_factory=dict)  # per event kind
    window_start_ns: int = 0
    window_end_ns: int = 0
    wall_offset_ns: int = 0  # add to a *_ns value to get Unix time in ns
    traced: bool = True  # False when there was nothing to trace (e.g. a remote upstream)
    omitted: dict[str, int] = msgspec.field(default_factory=dict)  # simplify(): left out, per rule

    def children(self, key: str | None) -> list[ProcessNode]:
        return [p for p in self.processes if p.parent == key]

    def roots(self) -> list[ProcessNode]:
        keys = {p.key for p in self.processes}
        return [p for p in self.processes if p.parent is None or p.parent not in keys]


class Violation(msgspec.Struct, kw_only=True, omit_defaults=True):
    rule: str
    phase: Phase
    mode: Mode
    reason: str
    evidence: list[str] = msgspec.field(default_factory=list)


class Verdict(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The outcome of one audit phase, or of a whole call. Suspicious-but-allowed is data."""

    decision: Decision = "allow"
    phase: Phase | None = None
    violations: list[Violation] = msgspec.field(default_factory=list)
    skipped: list[str] = msgspec.field(default_factory=list)  # rules skipped, with why
    llm_used: bool = False

    @property
    def rules(self) -> list[str]:
        return [v.rule for v in self.violations]

    @property
    def denying(self) -> list[Violation]:
        return [v for v in self.violations if v.mode == "enforce"]


class Timings(msgspec.Struct, kw_only=True):
    pre: float = 0.0
    exec: float = 0.0
    settle: float = 0.0
    post: float = 0.0
    total: float = 0.0


class AuditRecord(msgspec.Struct, kw_only=True, omit_defaults=False):
    """One JSON Lines record per guarded call."""

    call_id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    decision: Decision
    phase: Phase | None
    rules: list[str]
    reasons: list[str]
    mode: Literal["enforce", "observe"]
    timings_ms: Timings
    tree_complete: bool
    llm_used: bool
    tree: BehaviorTree | None
    ts: float = 0.0  # Unix time the call started
    task: str | None = None
    violations: list[Violation] = msgspec.field(default_factory=list)
    trace_id: str | None = None
    result: Any = None  # tool result content; filled only when the config opts in to content
    request_id: str | None = None  # the host's JSON-RPC request id, when the call had one
    terminated: bool = False  # an online rule denied and mtguard killed the call mid-run


tree_encoder = msgspec.json.Encoder()
tree_decoder = msgspec.json.Decoder(BehaviorTree)
record_decoder = msgspec.json.Decoder(AuditRecord)
