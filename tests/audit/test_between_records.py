"""Between-call records (between_calls.py) on synthetic periods with the real policy engine:
the synthetic call, the post rules with no declared call, kill evidence, and the per-server
task that cuts and emits them (bounded, cancelled with its group, survives a broken sink)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from mtguard_rt.audit import PolicyEngine, ToolPins, load_policy
from mtguard_rt.between_calls import BETWEEN_TOOL, between_record, is_between, run_between
from mtguard_rt.model import AuditRecord, DeclaredCall
from mtguard_rt.monitor.between import BetweenFeed, BetweenPolicy
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Kind
from mtguard_rt.monitor.paths import AT_FDCWD
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
