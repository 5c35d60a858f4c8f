"""Between-call records (between_calls.py) on synthetic periods with the real policy engine:
the synthetic call, the post rules with no declared call, kill evidence, and the per-server
task that cuts and emits them (bounded, cancelled with its group, survives a broken sink);
start-up records (startup.py): no task, the rules that may deny, quarantine, the gate."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from mtguard_rt.audit import PolicyEngine, ToolPins, load_policy
from mtguard_rt.between_calls import (
    BETWEEN_TOOL,
    between_record,
    is_between,
    is_startup,
    run_between,
)
from mtguard_rt.model import STARTUP_TOOL, AuditRecord, DeclaredCall
from mtguard_rt.monitor.between import BetweenFeed, BetweenPolicy
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Kind
from mtguard_rt.monitor.paths import AT_FDCWD
from mtguard_rt.startup import end_startup
from mtguard_rt.supervisor import Supervisor

from .trees import CANARIES, HOME

SERVER = 4_190_011  # no such pid on the host: nothing to look up in /proc
IDLE = DeclaredCall(call_id="between-calls", server="", tool="")


class _Watch:
    def __init__(self, feed: BetweenFeed) -> None:
        self.between = feed


def _supervisor(feed: BetweenFeed, sink: Any) -> Supervisor:
    policy = load_policy()
    return Supervisor(
        name="srv",
        upstream=None,  # type: ignore[arg-type]  # no call is made: only its records
        engine=PolicyEngine(policy),
        pins=ToolPins(policy.pinning_action),
        watch=_Watch(feed),  # type: ignore[arg-type]
        sink=sink,
        tools_by_server=lambda: {"srv": ["notes"]},
        canaries=dict(CANARIES),
        default_task="summarise my notes",
    )


def _open(path: str, flags: int = 0) -> RawEvent:
    return RawEvent(ts_ns=time.monotonic_ns(), cgroup_id=7, kind=int(Kind.OPEN), pid=SERVER,
                    a0=AT_FDCWD, s1=path.encode(), a1=flags)


def _feed() -> BetweenFeed:
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=0.02, min_gap_s=0.0))
    feed.seal()  # a call's window opened and closed: what follows is between calls
    return feed


@pytest.mark.anyio
async def test_a_canary_read_between_calls_is_a_denying_record_of_its_own() -> None:
    feed = _feed()
    sup = _supervisor(feed, lambda *a: None)
    feed.feed(_open(f"{HOME}/.ssh/id_rsa"))
    feed.killed(SERVER, "terminated online", "canary-touched")
    feed.seal()
    (period,) = feed.take()
    rec = await between_record(sup, period)
    assert is_between(rec) and rec.tool == BETWEEN_TOOL and rec.call_id == "srv-between-1"
    assert rec.arguments == {} and rec.task == "summarise my notes"
    assert rec.decision == "deny" and rec.phase == "post" and rec.terminated
    (v,) = [v for v in rec.violations if v.rule == "canary-touched"]
    assert v.mode == "enforce" and v.evidence[0].startswith("terminated online between calls")
    assert any(".ssh/id_rsa" in e for e in v.evidence)
    assert sup.quarantined is None  # a between record alerts; it refuses nothing later


@pytest.mark.anyio
async def test_the_servers_own_workspace_write_between_calls_allows() -> None:
    feed = _feed()
    sup = _supervisor(feed, lambda *a: None)
    feed.feed(_open("/work/notes/cache.json", 0o1101))  # O_WRONLY|O_CREAT|O_TRUNC
    feed.seal()
    (period,) = feed.take()
    rec = await between_record(sup, period)
    assert rec.decision == "allow", [(v.rule, v.reason) for v in rec.violations]
    assert not rec.terminated


@pytest.mark.anyio
async def test_run_between_emits_without_a_call_and_survives_a_broken_sink() -> None:
    feed = _feed()
    got: list[AuditRecord] = []
    first, second = anyio.Event(), anyio.Event()

    def sink(record: AuditRecord, traceparent: str | None, alert: str | None) -> None:
        if not first.is_set():
            first.set()
            raise RuntimeError("audit log full")  # the first is lost, the task goes on
        got.append(record)
        second.set()

    sup = _supervisor(feed, sink)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(run_between, sup)
            feed.feed(_open(f"{HOME}/.aws/credentials"))
            await first.wait()
            feed.feed(_open(f"{HOME}/.env"))
            await second.wait()
            tg.cancel_scope.cancel()
    (rec,) = got
    assert rec.call_id == "srv-between-2" and "canary-touched" in rec.rules


@pytest.mark.anyio
async def test_a_between_record_becomes_spans_and_alerts_as_a_deny() -> None:
    from opentelemetry.sdk.resources import Resource

    from mtguard_rt.telemetry.alerts import alert_kinds
    from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id

    feed = _feed()
    feed.feed(_open(f"{HOME}/.ssh/id_rsa"))
    feed.seal()
    (period,) = feed.take()
    rec = await between_record(_supervisor(feed, lambda *a: None), period)
    spans = SpanBuilder(Resource.create({"service.name": "test"})).build(rec, new_trace_id())
    assert spans and any(BETWEEN_TOOL in s.name for s in spans), [s.name for s in spans]
    assert "deny" in alert_kinds(rec, None, ["deny"])


# -- the start-up (startup.py): records of what the server did before its first answer -------
def _exec(pid: int, exe: str, argv: list[str]) -> list[RawEvent]:
    t = time.monotonic_ns()
    args = "\0".join(argv).encode()
    return [
        RawEvent(ts_ns=t, cgroup_id=7, kind=int(Kind.EXEC), pid=pid, a0=AT_FDCWD,
                 s1=exe.encode(), s2=args, a1=len(args), a2=len(argv)),
        RawEvent(ts_ns=t + 1, cgroup_id=7, kind=int(Kind.EXEC_RESULT), pid=pid),
    ]


@pytest.mark.anyio
async def test_a_canary_read_at_start_up_is_a_denying_startup_record_and_quarantines() -> None:
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    sup = _supervisor(feed, lambda *a: None)
    feed.feed(_open("/usr/lib/python3.11/json/__init__.py"))
    feed.feed(_open(f"/proc/self/root{HOME}/.aws/credentials"))  # the kernel kills the name
    feed.end_startup()
    (period,) = feed.take()
    rec = await between_record(sup, period)
    assert is_startup(rec) and is_between(rec)  # no call's record: replays skip it
    assert rec.tool == STARTUP_TOOL and rec.call_id == "srv-startup-1"
    assert rec.task is None and rec.arguments == {}  # no task: none given at start-up
    assert rec.decision == "deny" and "canary-touched" in rec.rules
    assert sup.quarantined is None  # the record alone: run_between quarantines (below)


@pytest.mark.anyio
async def test_end_startup_returns_once_judged_and_a_secret_read_has_quarantined() -> None:
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    got: list[AuditRecord] = []
    sup = _supervisor(feed, lambda record, *a: got.append(record))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(run_between, sup)
            feed.feed(_open(f"{HOME}/.ssh/id_rsa"))
            await end_startup(sup)
            assert sup.quarantined is not None and "canary-touched" in sup.quarantined
            assert [r.tool for r in got] == [STARTUP_TOOL]
            await end_startup(sup)  # done: at once, nothing more recorded
            tg.cancel_scope.cancel()
    assert len(got) == 1


@pytest.mark.anyio
async def test_observe_mode_records_a_start_up_deny_and_does_not_quarantine() -> None:
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    got: list[AuditRecord] = []
    sup = _supervisor(feed, lambda record, *a: got.append(record))
    sup.observe = True
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(run_between, sup)
            feed.feed(_open(f"{HOME}/.aws/credentials"))
            await end_startup(sup)
            tg.cancel_scope.cancel()
    (rec,) = got
    assert rec.decision == "deny" and rec.mode == "observe" and sup.quarantined is None


@pytest.mark.anyio
async def test_a_benign_start_up_allows() -> None:
    """An interpreter's start-up: its libraries, its own caches, a config read, a child."""
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    sup = _supervisor(feed, lambda *a: None)
    for path in ("/usr/lib/python3.11/os.py", "/etc/ssl/certs/ca-certificates.crt",
                 f"{HOME}/.gitconfig", "/etc/passwd"):
        feed.feed(_open(path))
    probe = _open(f"{HOME}/.npmrc")
    probe.ret = -2  # npm probing a ~/.npmrc that is not there (ENOENT): nothing read
    feed.feed(probe)
    feed.feed(_open(f"{HOME}/.cache/uv/lock", 0o1101))  # O_WRONLY|O_CREAT|O_TRUNC
    feed.feed(_open(f"{HOME}/.npm/_logs/debug-0.log", 0o1101))
    feed.feed(_open("/tmp/node-compile-cache/x", 0o1101))
    feed.end_startup()
    (period,) = feed.take()
    rec = await between_record(sup, period)
    assert rec.decision == "allow", [(v.rule, v.reason, v.evidence) for v in rec.violations]


def test_only_effects_no_call_explains_may_deny_a_start_up_record() -> None:
    """Rules that need a declared call (its shell, its command, its scope) keep their
    finding as observe evidence; a secret read, persistence, egress, process control deny."""
    from mtguard_rt.model import Verdict, Violation
    from mtguard_rt.startup import STARTUP_DENY, startup_verdict

    def found(rule: str) -> Violation:
        return Violation(rule=rule, phase="post", mode="enforce", reason=rule)

    shell = startup_verdict(Verdict(decision="deny", phase="post",
                                    violations=[found("unexpected-shell")]))
    assert shell.decision == "allow" and shell.phase is None
    assert shell.violations[0].mode == "observe"
    assert "at start-up" in shell.violations[0].evidence[-1]
    for rule in sorted(STARTUP_DENY):
        kept = startup_verdict(Verdict(decision="deny", phase="post",
                                       violations=[found("command-mismatch"), found(rule)]))
        assert kept.decision == "deny" and [v.mode for v in kept.violations] == [
            "observe", "enforce"], rule
    assert STARTUP_DENY >= {"canary-touched", "sensitive-file-read", "persistence-write",
                            "unexpected-network", "process-control"}


@pytest.mark.anyio
async def test_the_servers_own_launch_at_start_up_allows() -> None:
    """The gate shell execs the server, which runs a launcher's child: no call declared
    anything, and no shell or command rule may deny a start-up for it."""
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    sup = _supervisor(feed, lambda *a: None)
    for e in _exec(SERVER, "/usr/bin/node", ["node", "/usr/lib/node_modules/npm/bin/npx-cli.js",
                                              "-y", "@scope/server", "/ws"]):
        feed.feed(e)
    feed.feed(RawEvent(ts_ns=time.monotonic_ns(), cgroup_id=7, kind=int(Kind.FORK),
                       pid=SERVER, a0=SERVER + 1))
    for e in _exec(SERVER + 1, "/bin/sh", ["sh", "-c", "mcp-server-x /ws"]):
        feed.feed(e)
    feed.end_startup()
    (period,) = feed.take()
    rec = await between_record(sup, period)
    assert rec.decision == "allow", [(v.rule, v.reason, v.evidence) for v in rec.violations]


class _FlushingWatch(_Watch):
    def flush(self) -> None:  # monitor.Watch.flush without a ring buffer to drain
        self.between.seal()


@pytest.mark.anyio
async def test_what_is_pending_when_the_guard_lets_go_is_recorded() -> None:
    """A read the policy has not cut yet (flush_after_s far off) when the server's guard
    ends: run_between, cancelled, still records it (start-up here: the session ended before
    any answer)."""
    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    got: list[AuditRecord] = []
    sup = _supervisor(feed, lambda record, *a: got.append(record))
    sup.watch = _FlushingWatch(feed)  # type: ignore[assignment]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(run_between, sup)
            feed.feed(_open(f"{HOME}/.aws/credentials"))
            await anyio.sleep(0.05)
            assert got == []  # not due
            tg.cancel_scope.cancel()
    (rec,) = got
    assert is_startup(rec) and "canary-touched" in rec.rules


@pytest.mark.anyio
async def test_a_start_up_record_becomes_spans_alerts_and_counts_apart_in_metrics() -> None:
    from opentelemetry.sdk.resources import Resource

    from mtguard_rt.agent.report import call_report
    from mtguard_rt.telemetry.alerts import alert_kinds
    from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id

    feed = BetweenFeed(IDLE, BetweenPolicy(flush_after_s=60.0, min_gap_s=0.0))
    feed.feed(_open(f"{HOME}/.ssh/id_rsa"))
    feed.end_startup()
    (period,) = feed.take()
    rec = await between_record(_supervisor(feed, lambda *a: None), period)
    spans = SpanBuilder(Resource.create({"service.name": "test"})).build(rec, new_trace_id())
    assert spans and any(STARTUP_TOOL in s.name for s in spans), [s.name for s in spans]
    assert "deny" in alert_kinds(rec, None, ["deny"])
    assert call_report(rec).between  # not counted as a call
