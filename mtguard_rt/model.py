"""The data every layer shares: the declared call, the tool behavior tree, the verdict.

Plain msgspec structs, JSON round-trip safe. The monitor builds trees, the audit reads them
and produces verdicts, telemetry exports both; none of them owns these types. Processes are
stored flat with a `parent` key (the observed edges), so rules can scan them without
recursion and the JSON stays shallow. Kernel times are `CLOCK_MONOTONIC` ns (`*_ns`);
`BehaviorTree.wall_offset_ns` maps them to Unix time.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

FileOp = Literal[
    "open", "unlink", "rename", "mkdir", "rmdir", "chmod", "chdir", "symlink", "link"
]
Decision = Literal["allow", "deny"]
Phase = Literal["pre", "post"]
Mode = Literal["enforce", "observe", "off"]


# the tool name of a between-call record's synthetic call (no call was in flight)
BETWEEN_TOOL = "(between calls)"
# ... and of a start-up record's: what the server did from its release to its first answer
STARTUP_TOOL = "(startup)"


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
    # rename: the destination; symlink: the link's text as given (not resolved: it is read
    # relative to the link's directory); link (hard): the existing file the new name joins
    target: str | None = None
    flags: list[str] = msgspec.field(default_factory=list)  # read, write, create, truncate
    mode: int | None = None  # chmod/mkdir/creat mode bits
    result: int = 0  # syscall return value: fd or 0 on success, -errno on failure


Transport = Literal["tcp", "udp", "icmp", "raw", "other", "unknown"]
DATAGRAM_TRANSPORTS = frozenset({"udp", "icmp", "raw"})  # a connect() alone sends nothing


class NetEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`connect`/`accept` of a socket, or `send`: datagrams to an explicit destination (or
    to a peer connected before the window). `sent` counts the datagrams seen going to
    `address` (for a connect: after it), a lower bound. Trees from before `transport`
    existed decode as "unknown", which the rules treat as egress."""

    ts_ns: int
    op: Literal["connect", "accept", "send"]
    family: Literal["ipv4", "ipv6"]
    address: str
    port: int
    result: int = 0
    transport: Transport = "unknown"
    sent: int = 0
    # refused by the sandbox's network policy in the kernel (monitor/egress.py): attempts
    # (a connect or sendmsg failed with EPERM) or packets dropped; 0: not refused
    refused: int = 0
    # bytes seen going to `address` (datagrams, or a stream's writes after its connect), a
    # lower bound like `sent`; 0: none seen (or a tree from before it was recorded)
    bytes_sent: int = 0

    @property
    def egress(self) -> bool:
        """Did (or may) traffic leave for `address`? A connect of a datagram socket that
        sent nothing did not; a stream connect did (even one that failed: it tried)."""
        if self.op == "accept":
            return False
        if self.op == "connect" and self.transport in DATAGRAM_TRANSPORTS:
            return self.sent > 0
        return True

    @property
    def summary(self) -> str:
        """`connect udp 192.0.2.1:443, no datagram sent` and the like (viewers, rules)."""
        where = f"[{self.address}]:{self.port}" if self.family == "ipv6" else (
            f"{self.address}:{self.port}"
        )
        how = "" if self.transport == "unknown" else f" {self.transport}"
        text = f"{self.op}{how} {where}"
        if self.refused:
            times = f" ({self.refused} times)" if self.refused > 1 else ""
            return f"{text}, refused by network policy{times}"
        if self.op == "send" or self.transport in DATAGRAM_TRANSPORTS:
            n = self.sent
            text += ", no datagram sent" if n == 0 else f", {n} datagram{'s' if n > 1 else ''}"
        if self.bytes_sent:
            text += f", {self.bytes_sent} bytes sent"
        return text


class UnixEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`connect` of an AF_UNIX socket: `path` as passed (made absolute against the cwd when
    known), or an abstract name written `@name` (`abstract`). `result`: 0 or -errno."""

    ts_ns: int
    path: str
    abstract: bool = False
    result: int = 0
    # an abstract name under the host's network: who holds the socket bound to it, looked up
    # once the call settled (monitor/abstract_unix.py): the sandbox ("own"), another program
    # of the host ("host"), or nobody any more ("gone"); None: not looked up
    holder: Literal["own", "host", "gone"] | None = None


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


SignalRelation = Literal["self", "descendant", "sandbox", "outside", "unknown"]


class SignalEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A signal this process sent (kill, tkill, tgkill, pidfd_send_signal, rt_sigqueueinfo,
    rt_tgsigqueueinfo). `target_pid` is what the sender passed, in the sandbox's pid
    namespace (a negative kill() target is a process group; for pidfd_send_signal it is the
    pidfd). Who the kernel really signalled comes from its signal_generate tracepoint:
    `target_key` (the tree's process, when the target is in the tree), `target_host_pid`,
    `target_comm`, and `delivered` (how many tasks got it; 0 for a probe, signal 0, or a
    refused send). `relation` of the target to the sender: itself (or one of its threads),
    a descendant, another process of the sandbox, outside (in the kernel's view: in another
    cgroup as the signal was generated), or unknown (nothing was generated, or the kernel
    ignored it for a dying process of the sandbox). `started_in_call`: the target began
    during this call's window."""

    ts_ns: int
    syscall: str
    signal: int
    name: str  # "SIGTERM", "0" for a probe, "SIGRT3"...
    target_pid: int
    thread: bool = False  # directed at one thread (tkill, tgkill, rt_tgsigqueueinfo)
    target_tid: int | None = None  # the tid passed to tgkill / rt_tgsigqueueinfo
    pidfd: bool = False  # target_pid is a pidfd, resolved only through what was generated
    target_key: str | None = None
    target_host_pid: int | None = None
    target_comm: str | None = None
    target_argv: list[str] = msgspec.field(default_factory=list)  # when the target is in the tree
    relation: SignalRelation = "unknown"
    started_in_call: bool = False
    target_started_by: str | None = None  # the earlier call that spawned the target (a worker)
    delivered: int = 0
    more_targets: list[str] = msgspec.field(default_factory=list)  # keys/host pids beyond the first
    result: int = 0  # the syscall's return: 0, or -errno

    @property
    def summary(self) -> str:
        """`kill SIGKILL -> pid 7 (sleep 600), sandbox` and the like (viewers, rules)."""
        to = f"pidfd {self.target_pid}" if self.pidfd else f"pid {self.target_pid}"
        if self.thread and self.target_tid is not None:
            to += f" tid {self.target_tid}"
        who = " ".join(self.target_argv) or self.target_comm or ""
        text = f"{self.syscall} {self.name} -> {to}"
        if who:
            text += f" ({who[:120]})"
        text += f", {self.relation}"
        if self.target_started_by:
            text += f", a worker of call {self.target_started_by}"
        if self.delivered > 1:
            text += f", {self.delivered} tasks"
        if self.result < 0:
            text += f", failed {self.result}"
        elif self.signal != 0 and self.delivered == 0:
            text += ", nothing signalled"
        return text


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
    # seeded: the earlier call (its id) of this watch that spawned it (a worker that call left
    # running, or a process one of them forked between calls); None: not made by a call
    started_by: str | None = None
    execs: list[ExecEvent] = msgspec.field(default_factory=list)
    files: list[FileEvent] = msgspec.field(default_factory=list)
    net: list[NetEvent] = msgspec.field(default_factory=list)
    dns: list[DnsEvent] = msgspec.field(default_factory=list)
    signals: list[SignalEvent] = msgspec.field(default_factory=list)
    unix: list[UnixEvent] = msgspec.field(default_factory=list)  # AF_UNIX connects

    @property
    def command_line(self) -> str:
        return " ".join(self.argv) if self.argv else self.exe


class StdioMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One newline-delimited JSON-RPC message as the kernel saw it cross the server's stdio.

    `digest` is `sha256:` of the canonical JSON (sorted keys) of what the rules compare:
    `{"name", "arguments"}` of a tools/call request, `result` (or `error`) of a response; of
    the raw bytes when `truncated` (the message was not captured whole: unverified)."""

    ts_ns: int
    pid: int
    method: str | None = None
    id: str | int | float | None = None  # JSON-RPC ids are strings or numbers
    tool: str | None = None  # tools/call: params.name
    arguments: Any = None  # tools/call: params.arguments (kept up to a size bound)
    digest: str = ""
    size: int = 0  # bytes of the line
    truncated: bool = False
    error: bool = False  # a response carrying `error` instead of `result`
    # tools/call: the guard's call whose request this is (set by the guard from what it sent;
    # a request read after its own call's window, in a later one or between calls, is late)
    dispatched_by: str | None = None


class StdioCapture(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the server read on its stdin (`requests`: every message with a `method`) and
    wrote on its stdout (`responses`: messages with an `id` and no `method`) during the
    window, from the kernel (EV_STDIO). `unverified` says why it may not be the whole story
    (cut syscalls, lost records, unreadable buffers): rules never deny on missing evidence."""

    server: str | None = None  # the guarded server whose sandbox this was (set by the guard)
    request_id: str | int | float | None = None  # the JSON-RPC id the guard sent the call with
    answered: bool = False  # the guard received a response to it (set by the guard)
    requests: list[StdioMessage] = msgspec.field(default_factory=list)
    responses: list[StdioMessage] = msgspec.field(default_factory=list)
    # what it read while no call's window was open, since the previous window
    between_calls: list[StdioMessage] = msgspec.field(default_factory=list)
    notifications_out: int = 0  # other messages the server wrote (notifications, requests)
    garbage_lines: int = 0  # non-UTF-8 / non-JSON / non-object lines, per direction summed
    bytes_in: int = 0
    bytes_out: int = 0
    unverified: list[str] = msgspec.field(default_factory=list)
    lossy: bool = False  # records were lost in the window: no message may be trusted whole


def canonical_digest(value: Any) -> str:
    """`sha256:<hex>` of `value` as JSON with sorted keys: equal for equal JSON values,
    whatever key order or spacing the bytes on the wire had."""
    return "sha256:" + hashlib.sha256(_canonical.encode(value)).hexdigest()


def call_digest(tool: str, arguments: Any) -> str:
    """The digest of a tools/call as the integrity rules compare it: name and arguments."""
    return canonical_digest({"name": tool, "arguments": arguments or {}})


class BehaviorTree(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Root = declared call; process branch (flat, `parent` edges); unattributed DNS."""

    call: DeclaredCall
    processes: list[ProcessNode] = msgspec.field(default_factory=list)
    dns: list[DnsEvent] = msgspec.field(default_factory=list)
    complete: bool = True
    incomplete_reasons: list[str] = msgspec.field(default_factory=list)
    drops: dict[str, int] = msgspec.field(default_factory=dict)  # per event kind
    # this sandbox's own records lost in the kernel during the window, per kind (`open_write`:
    # a writing open); `drops` counts the whole monitor's, other sandboxes' floods included
    lost: dict[str, int] = msgspec.field(default_factory=dict)
    # the sandbox shares the host's network namespace: its abstract AF_UNIX names are the host's
    host_network: bool = False
    window_start_ns: int = 0
    window_end_ns: int = 0
    wall_offset_ns: int = 0  # add to a *_ns value to get Unix time in ns
    traced: bool = True  # False when there was nothing to trace (e.g. a remote upstream)
    omitted: dict[str, int] = msgspec.field(default_factory=dict)  # simplify(): left out, per rule
    stdio: StdioCapture | None = None  # the server's stdio as the kernel saw it (integrity rules)
    # network-policy refusals no process can be named for (packets arriving from an address
    # not allowed, dropped in softirq context); attributed ones are in their process's `net`
    refused: list[NetEvent] = msgspec.field(default_factory=list)
    # the names the sandbox may reach, enforced in the kernel (`--allow-domain`): every
    # connection that was not refused went to one of them (or a resolver); [] without a policy
    network_policy: list[str] = msgspec.field(default_factory=list)
    # keys of processes spawned during the call and still alive once it settled: workers of
    # the server (git's helpers, a browser); their later events go to `between` or a later call
    workers: list[str] = msgspec.field(default_factory=list)
    # what earlier calls' workers did while no call's window was open, since the previous
    # window (its `call` is the call that left them running); None when nothing was seen
    between: BehaviorTree | None = None
    # the resolvers the sandbox really uses (its /etc/resolv.conf as mounted, or the policy's
    # `dns`): only these may be reached on a resolver port ([]: unknown, none is exempt)
    resolvers: list[str] = msgspec.field(default_factory=list)

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


class RollbackReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the workspace rollback (`[sandbox] rollback`) did with one call's file changes.

    `action`: committed (allowed: the changes are the new baseline), restored (an enforced
    deny: the workspace is back as it was), kept (a deny in observe mode: nothing is rolled
    back), failed (the restore or commit did not complete: `error`, `failed`)."""

    mode: Literal["tree", "scan"]
    action: Literal["committed", "restored", "kept", "failed"]
    workspace: str
    paths: list[str] = msgspec.field(default_factory=list)  # changed entries, at most 50
    unlisted: int = 0  # changed entries beyond those in `paths`
    created: int = 0
    modified: int = 0
    deleted: int = 0
    scanned: int = 0  # entries stat'ed after the call
    fallback: str | None = None  # why tree mode scanned the whole workspace instead
    synced: int = 0  # entries changed between calls, taken as the baseline before this one
    failed: list[str] = msgspec.field(default_factory=list)  # "path: why" not restored
    error: str | None = None
    ms: float = 0.0  # rollback time on the call path: before, after and settle


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
    rollback: RollbackReport | None = None  # workspace rollback, when `[sandbox] rollback` is on


_canonical = msgspec.json.Encoder(order="sorted")
tree_encoder = msgspec.json.Encoder()
tree_decoder = msgspec.json.Decoder(BehaviorTree)
record_decoder = msgspec.json.Decoder(AuditRecord)
