"""Between-call periods as audit records: `run_between(supervisor)`, one task per server.

What a sandbox does with no call in flight (the server's own processes, workers earlier calls
left running) is cut by the monitor's `BetweenFeed` (monitor/between.py, its policy bounds
how often) and becomes an `AuditRecord` of its own: a synthetic declared call (tool
`(between calls)`, call id `<server>-between-<n>`), checked by the same post rules with no
call arguments and no result (the task is the session's: the last call's, else the default),
and emitted to the supervisor's sink like a call's record (it alerts as a deny does). In
enforce, a confidentiality deny (a secret or canary read by a server's thread, a timer, a
worker: `Supervisor._quarantine_after`) or a loss (`lost-events`: a flood between calls
hides what it did) quarantines the server, as a call's would: every later call is refused
and nothing it sends reaches the host, so no later call hands the secret over. Other denies
(a signal, a write) alert only. Kills (kernel kill-on-touch, an online rule on a worker) are
evidence. The start-up's periods (before the server's first answer) are
recorded here too, as `(startup)` records (startup.py: no task, a narrower set of rules that
may deny, and a confidentiality deny quarantines). The task lives in the guard's per-server
task group: cancelling that group ends it; each wait inside is bounded by the feed's policy.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from .audit import CallContext
from .audit.provenance import gather
from .audit.rules_lost import RULE as LOST_RULE
from .audit.session import session_view
from .model import (
    BETWEEN_TOOL,
    STARTUP_TOOL,
    AuditRecord,
    DeclaredCall,
    Timings,
    Verdict,
    Violation,
)
from .startup import startup_call, startup_verdict

if TYPE_CHECKING:
    from .monitor.between import BetweenFeed, BetweenPeriod
    from .supervisor import Supervisor

_log = logging.getLogger(__name__)
FLUSH_S = 10.0  # recording what is pending when the guard lets go of a server (rules: ms)


def between_call(server: str, seq: int) -> DeclaredCall:
    """The synthetic declared call a between-call record is about."""
    return DeclaredCall(call_id=f"{server}-between-{seq}", server=server, tool=BETWEEN_TOOL,
                        arguments={})


def is_between(record: AuditRecord) -> bool:
    """A record of no call: a between-call period's, or the start-up's (`is_startup`)."""
    return (record.tool == BETWEEN_TOOL and "-between-" in record.call_id) or is_startup(record)


def is_startup(record: AuditRecord) -> bool:
    return record.tool == STARTUP_TOOL and "-startup-" in record.call_id


async def run_between(
    sup: Supervisor, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Record the server's between-call periods until cancelled (nothing without a monitor).
    Cancelled (the guard lets go of the server), it first records what is pending: the
    events still in the ring buffer, cut by the watch's `flush` (bounded by `FLUSH_S`)."""
    feed: BetweenFeed | None = getattr(sup.watch, "between", None)
    task_status.started()
    if feed is None or not feed.policy.enabled:
        return
    taken: list[BetweenPeriod] = []
    try:
        while True:
            taken = await feed.next_periods()
            while taken:
                await _emit(sup, feed, taken[0])
                del taken[0]
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(FLUSH_S):
            flush = getattr(sup.watch, "flush", None)
            if flush is not None:
                flush()
            for period in [*taken, *feed.take()]:
                await _emit(sup, feed, period)


async def _emit(sup: Supervisor, feed: BetweenFeed, period: BetweenPeriod) -> None:
    try:
        record = await between_record(sup, period)
        if record.decision == "deny":
            _quarantine(sup, record, period)
        sup.sink(record, None, None)
    except Exception as exc:  # a broken rule or sink must not end the server's guard
        _log.warning("%s: between-call record %d lost: %r", sup.name, period.seq, exc)
    finally:
        feed.judged(period)  # the start-up's first answer / first call waits on it


async def between_record(sup: Supervisor, period: BetweenPeriod) -> AuditRecord:
    """One between-call cut, post-verified with a neutral context (no arguments, no result);
    a start-up cut with no task and only `startup.STARTUP_DENY` rules denying."""
    t0 = time.perf_counter()
    call = (startup_call if period.startup else between_call)(sup.name, period.seq)
    tree = period.tree
    tree.call = call
    tree.network_policy = list(getattr(sup.watch, "network_policy", None) or [])
    tree.resolvers = list(getattr(sup.watch, "resolvers", None) or [])  # port 53: these only
    task = None if period.startup else getattr(sup, "last_task", None) or sup.default_task
    servers = sup.tools_by_server()
    ctx = CallContext(
        call=call,
        task=task,
        tools_by_server=servers,
        recent_calls=list(sup.recent),
        canaries=sup.canaries,
        untrusted=gather(sup.untrusted, servers, sup.route),
        session=session_view(sup, servers, sup.route),
        scope=sup.scope,
    )
    post = await sup.engine.post_verify(ctx, tree, {}, judge=not period.startup)
    violations = list(post.violations)
    if period.kernel_kills:  # as a call's (supervisor._dispatch)
        why = "a protected path or program was touched: SIGKILLed in the kernel"
        violations.append(Violation(rule="kill-on-touch", phase="post", mode="enforce",
                                    reason=why, evidence=list(period.kernel_kills)))
    for pid, rule in period.online_kills.items():  # a worker killed by the closed call's hook
        line = f"terminated online between calls: SIGKILL to pid {pid}"
        same = next((v for v in violations if v.rule == rule), None)
        if same is None:
            same = Violation(rule=rule, phase="post", mode="enforce",
                             reason=f"{rule}: a process was terminated online between calls")
            violations.append(same)
        same.mode = "enforce"
        same.evidence.insert(0, line)
    deny = any(v.mode == "enforce" for v in violations)
    verdict = Verdict(
        decision="deny" if deny else "allow",
        phase="post" if deny else None,
        violations=violations,
        skipped=post.skipped,
        llm_used=post.llm_used,
    )
    if period.startup:
        verdict = startup_verdict(verdict)
    timings = Timings(post=(time.perf_counter() - t0) * 1000)
    record = sup._record(call, task, verdict, tree, timings, t0)
    record.ts = time.time() - (time.monotonic_ns() - tree.window_start_ns) / 1e9
    record.terminated = bool(period.kernel_kills or period.online_kills)
    return record


def _quarantine(sup: Supervisor, record: AuditRecord, period: BetweenPeriod) -> None:
    """A confidentiality deny quarantines the server (a call's would too); between calls,
    so does a loss: the flood may have hidden a secret read the next call hands over."""
    verdict = _verdict_of(record)
    sup._quarantine_after(verdict)
    if not period.startup and any(v.rule == LOST_RULE for v in verdict.denying):
        sup.quarantine(f"{LOST_RULE} between calls")


def _verdict_of(record: AuditRecord) -> Verdict:
    return Verdict(decision=record.decision, phase=record.phase, violations=record.violations)
