"""Online rules: the post-execution rules that can decide on one event, run while a call runs.

`OnlineRules(policy, ctx)` precomputes what a call may touch; `check(proc, event)` takes one
built event (file, exec, connect, datagrams sent) of one process and returns the `Violation`
it proves, or None. Pure and synchronous (no monitor import): the monitor window calls it per
event and the supervisor decides whether to terminate. A rule that cannot decide from one
event (a relative name, a connect whose address may come from an allowed DNS name) defers to
post-verification.

The call's integrity rules run online too, on each whole tools/call the server's stdin
yields (kernel-witnessed, `StdioMessage`; truncated ones never decide): `request-mismatch`
when the call's own request (the guard's JSON-RPC id, `expect()`) is another tool, other
arguments or read by another server than the declared one; `undeclared-request` for any
further tools/call read in the window (a replay, an injected call), except one the guard
itself sent for another call (`DispatchLedger`): a server reading its stdin late is no attack.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from ..model import (
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
    StdioMessage,
    Violation,
    call_digest,
)
from .consent import WriteConsent, online_persistence
from .context import CallContext
from .expected import Expected
from .patterns import canonical_ip
from .persist_dirs import may_write_under
from .policy import Policy
from .programs import programs_of
from .rules_exec import judged_program
from .rules_files import PERSISTENCE_WHY, took_effect
from .rules_integrity import (
    MISMATCH_WHY,
    UNDECLARED_WHY,
    DispatchLedger,
    mismatch_evidence,
    undeclared_line,
)
from .rules_net import allowed_names, egress_text, exempt_destination
from .rules_pre import violation
from .treeview import describe, is_write, label

OnlineMode = Literal["enforce", "observe", "off"]
OnlineEvent = FileEvent | ExecEvent | NetEvent | StdioMessage
ONLINE_RULES = (
    "canary-touched",
    "persistence-write",
    "unexpected-shell",
    "unexpected-network",
    "request-mismatch",
    "undeclared-request",
)


class OnlineRules:
    """Single-event rules for one call. Each rule fires at most once per call."""

    def __init__(self, policy: Policy, ctx: CallContext) -> None:
        self.policy = policy
        self.ctx = ctx
        self._on = {r for r in ONLINE_RULES if policy.mode_of(r) != "off"}
        self._expected = Expected.of(ctx, policy)
        self._command_tool = self._expected.command_tool
        self._programs = programs_of(ctx, policy)  # what each exec really runs, by identity
        names = allowed_names(ctx, policy)
        ips = set(policy.allowed_addresses)
        ips.update(ip for n in names if (ip := canonical_ip(n)) is not None)
        self._ips = ips
        # a named host may resolve to any address: only the tree (with its DNS) can tell
        self._names_given = any(canonical_ip(n) is None for n in names)
        self.fired: list[Violation] = []
        self._want = call_digest(ctx.call.tool, ctx.call.arguments)
        self._request_id: Any = None  # the JSON-RPC id the guard sends the call with
        self._reader: str | None = None  # the server whose sandbox is watched (may be routed)
        self._own: StdioMessage | None = None  # the call's own request, once read
        self.consent = WriteConsent(ctx, policy)  # write-only canaries the user asked to edit
        self._ledger: DispatchLedger | None = None  # what the guard sent to that sandbox
        # the sandbox runs under a kernel-enforced allowlist (`--allow-domain`): what the kernel
        # let through is derived, what it refused is stopped already (the post rule reports it)
        self.network_policy = False
        # the sandbox's resolvers (monitor.Watch.resolvers); None: unknown, port 53 deferred
        self.resolvers: list[str] | None = None

    def expect(self, request_id: Any, server: str, ledger: DispatchLedger | None = None) -> None:
        """Before dispatch: the id the guard sends this call with, the server (sandbox) it is
        sent to (another than the declared one when the host routed it) and that sandbox's
        ledger of the guard's own requests."""
        valid = isinstance(request_id, str | int | float) and not isinstance(request_id, bool)
        self._request_id = request_id if valid else None
        self._reader = server
        self._own = None
        self._ledger = ledger

    def kernel_consent(self, persistence: list[str] | None = None) -> list[str]:
        """The write-only canaries and `persistence` files (kill on write in the kernel)
        this call may write (`WriteConsent.may_write`): the supervisor lifts their kill on
        write for the call's window only."""
        only = self.policy.canary_write_only
        paths = [p for p in self.ctx.canaries if only.matches(p)]
        if "canary-touched" not in self._on:
            paths = []
        dirs: list[str] = []
        if "persistence-write" in self._on:
            dirs = [p for p in persistence or [] if p.endswith("/")]  # the class's directories
            paths += [p for p in persistence or [] if p not in paths and p not in dirs]
        lifted = [d for d in dirs if may_write_under(self.consent, d)]
        return self.consent.paths(paths) + lifted

    def check(self, proc: ProcessNode, ev: OnlineEvent) -> Violation | None:
        if isinstance(ev, FileEvent):
            self._programs.wrote(ev)  # an exec of a file the call wrote is an unknown program
            found = self._file(proc, ev)
        elif isinstance(ev, ExecEvent):
            found = self._exec(proc, ev)
        elif isinstance(ev, StdioMessage):
            found = self._stdio(ev)
        else:
            found = self._net(proc, ev)
        if found is None or any(v.rule == found.rule for v in self.fired):
            return None
        self.fired.append(found)
        return found

    def _file(self, proc: ProcessNode, ev: FileEvent) -> Violation | None:
        if not (ev.resolved or ev.path.startswith("/")):
            return None  # a relative name: the post rules match it by its tail
        if not took_effect(ev):
            return None  # a failed open or rename read or wrote nothing (kernel kills apart)
        policy = self.policy
        paths = [ev.path.rstrip("/") or "/"]
        if ev.target:
            paths.append(ev.target.rstrip("/") or "/")
        for path in paths:
            line = f"{label(proc)} {ev.op} {path} {describe(ev)}"
            if "canary-touched" in self._on and path in self.ctx.canaries:
                write_only = policy.canary_write_only.matches(path)
                if not write_only or (is_write(ev) and not self.consent.may_write(path)):
                    reason = "a canary credential was touched"
                    return violation("canary-touched", policy, "post", reason, [line])
            if (
                "persistence-write" in self._on
                and is_write(ev)
                and ev.op != "mkdir"  # a directory runs nothing: what lands in it is judged
                and online_persistence(policy, path)
                and not self.consent.may_write(path)  # an asked place: the content is judged after
            ):
                return violation("persistence-write", policy, "post", PERSISTENCE_WHY, [line])
        return None

    def _exec(self, proc: ProcessNode, ev: ExecEvent) -> Violation | None:
        if proc.learned != "observed":
            return None  # the audit's notion: the long-lived server is its own interpreter
        done = [e for e in proc.execs if e.result == 0]
        before = done[-2].path if len(done) > 1 else None
        prog = self._programs.seen(proc, ev, before)  # by identity (the post rules reuse it)
        if "unexpected-shell" not in self._on or self._command_tool:
            return None
        # judged as what it really is: a renamed shell as the shell, a loader as its program,
        # a program with no file on disk (or one the session wrote) as a shell would be
        exe, argv = prog.exe, prog.argv
        exp = self._expected
        why = judged_program(exp, prog)
        if why is None:
            return None
        # A shell is evidence, not a verdict: only what its command line alone proves (a
        # dangerous pattern, a secret or persistence path the arguments do not name) decides
        # here; what it then does is judged on the tree. A program with no file on disk is
        # proof enough.
        if exp.exec_why(exe, argv) is not None:
            return None
        effects = exp.command_effects(proc, exe, argv)
        if prog.kind == "no-file":
            effects = [f"{label(proc)} ran a program with no file on disk", *effects]
        if not effects:
            return None
        reason = f"{self.ctx.call.tool!r} is not a command tool but spawned a shell or interpreter"
        line = f"{label(proc)} executed {shlex.join(ev.argv or [ev.path])}"
        if why:
            line += f" ({why})"
        return violation("unexpected-shell", self.policy, "post", reason, [line, *effects])

    def _net(self, proc: ProcessNode, ev: NetEvent) -> Violation | None:
        if "unexpected-network" not in self._on or not ev.egress or self._names_given:
            return None  # not egress: an accept, a datagram socket's connect before a send
        if self.network_policy or ev.refused:
            return None  # allowed by the kernel's allowlist, or refused by it: nothing left
        ip = canonical_ip(ev.address) or ev.address
        if self.resolvers is None and ev.port in self.policy.allowed_ports:
            return None  # which resolvers the sandbox uses is unknown: the post rule decides
        if ip in self._ips or exempt_destination(self.policy, self.resolvers or [], ip, ev.port):
            return None
        reason = "network destinations not derived from the arguments, task or allowlist"
        line = f"{label(proc)} {egress_text(ev, ip)}"
        return violation("unexpected-network", self.policy, "post", reason, [line])

    def _stdio(self, m: StdioMessage) -> Violation | None:
        """A whole tools/call the server read during the window (the post rules' notion,
        decided as each one is read: the first with the guard's id, or, when that id is not
        a JSON-RPC id, the first one read, is the call's own; any other is undeclared)."""
        if m.method != "tools/call" or m.truncated or self._reader is None:
            return None  # not a call, not captured whole (unverified), or not dispatched yet
        own = self._own
        ledger, call_id = self._ledger, self.ctx.call.call_id
        if own is None and (self._request_id is None or m.id == self._request_id):
            self._own = m
            if ledger is not None:
                ledger.claim(m, call_id)
            if "request-mismatch" not in self._on:
                return None
            ev = mismatch_evidence(self.ctx.call, m, self._reader)
            if not ev:
                return None
            return violation("request-mismatch", self.policy, "post", MISMATCH_WHY, ev)
        if ledger is not None and ledger.claim(m) not in (None, call_id):
            return None  # another call's request the guard sent, read late: declared
        if "undeclared-request" not in self._on:
            return None
        line = undeclared_line(m, own)
        return violation("undeclared-request", self.policy, "post", UNDECLARED_WHY, [line])
