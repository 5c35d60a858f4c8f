"""Online rules: the post-execution rules that can decide on one event, run while a call runs.

`OnlineRules(policy, ctx)` precomputes what a call may touch; `check(proc, event)` takes one
built event (file, exec, connect, datagrams sent) of one process and returns the `Violation`
it proves, or None. Pure and synchronous (no monitor import): the monitor window calls it per
event and the supervisor decides whether to terminate. A rule that cannot decide from one
event (a relative name, a connect whose address may come from an allowed DNS name) defers to
post-verification.
"""

from __future__ import annotations

import shlex
from typing import Literal

from ..model import ExecEvent, FileEvent, NetEvent, ProcessNode, Violation
from .context import CallContext
from .patterns import canonical_ip, is_loopback
from .policy import PERSISTENCE, Policy
from .rules_net import allowed_names, egress_text
from .rules_pre import violation
from .text import names_path
from .treeview import describe, is_write, label

OnlineMode = Literal["enforce", "observe", "off"]
OnlineEvent = FileEvent | ExecEvent | NetEvent
ONLINE_RULES = ("canary-touched", "persistence-write", "unexpected-shell", "unexpected-network")


class OnlineRules:
    """Single-event rules for one call. Each rule fires at most once per call."""

    def __init__(self, policy: Policy, ctx: CallContext) -> None:
        self.policy = policy
        self.ctx = ctx
        self._on = {r for r in ONLINE_RULES if policy.mode_of(r) != "off"}
        self._command_tool = policy.is_command_tool(ctx.call.tool, ctx.input_schema)
        names = allowed_names(ctx, policy)
        ips = set(policy.allowed_addresses)
        ips.update(ip for n in names if (ip := canonical_ip(n)) is not None)
        self._ips = ips
        # a named host may resolve to any address: only the tree (with its DNS) can tell
        self._names_given = any(canonical_ip(n) is None for n in names)
        self.fired: list[Violation] = []

    def check(self, proc: ProcessNode, ev: OnlineEvent) -> Violation | None:
        if isinstance(ev, FileEvent):
            found = self._file(proc, ev)
        elif isinstance(ev, ExecEvent):
            found = self._exec(proc, ev)
        else:
            found = self._net(proc, ev)
        if found is None or any(v.rule == found.rule for v in self.fired):
            return None
        self.fired.append(found)
        return found

    def _file(self, proc: ProcessNode, ev: FileEvent) -> Violation | None:
        if not (ev.resolved or ev.path.startswith("/")):
            return None  # a relative name: the post rules match it by its tail
        policy = self.policy
        paths = [ev.path.rstrip("/") or "/"]
        if ev.target:
            paths.append(ev.target.rstrip("/") or "/")
        for path in paths:
            line = f"{label(proc)} {ev.op} {path} {describe(ev)}"
            if "canary-touched" in self._on and path in self.ctx.canaries:
                if is_write(ev) or not policy.canary_write_only.matches(path):
                    reason = "a canary credential was touched"
                    return violation("canary-touched", policy, "post", reason, [line])
            if (
                "persistence-write" in self._on
                and is_write(ev)
                and policy.classify(path) & PERSISTENCE
                and not names_path(self.ctx.arg_texts, path)
            ):
                reason = "a persistence location the arguments do not name was modified"
                return violation("persistence-write", policy, "post", reason, [line])
        return None

    def _exec(self, proc: ProcessNode, ev: ExecEvent) -> Violation | None:
        if "unexpected-shell" not in self._on or self._command_tool:
            return None
        if proc.learned != "observed":
            return None  # the audit's notion: the long-lived server is its own interpreter
        argv = ev.argv or [ev.path]
        if not (self.policy.is_shell(ev.path) or self.policy.is_shell(argv[0])):
            return None
        reason = f"{self.ctx.call.tool!r} is not a command tool but spawned a shell or interpreter"
        line = f"{label(proc)} executed {shlex.join(argv)}"
        return violation("unexpected-shell", self.policy, "post", reason, [line])

    def _net(self, proc: ProcessNode, ev: NetEvent) -> Violation | None:
        if "unexpected-network" not in self._on or not ev.egress or self._names_given:
            return None  # not egress: an accept, a datagram socket's connect before a send
        ip = canonical_ip(ev.address) or ev.address
        if ip in self._ips or ev.port in self.policy.allowed_ports or is_loopback(ip):
            return None
        reason = "network destinations not derived from the arguments, task or allowlist"
        line = f"{label(proc)} {egress_text(ev, ip)}"
        return violation("unexpected-network", self.policy, "post", reason, [line])
