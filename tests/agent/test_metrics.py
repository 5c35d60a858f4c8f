"""The agent's metrics: counting call reports, the text format, bounded label sets, and
the loopback HTTP endpoint (a real socket) answering, refusing and timing out."""

from __future__ import annotations

import re
import socket
from typing import Any

import anyio
import pytest

from mtguard_rt.agent import metrics as m
from mtguard_rt.agent.protocol import TAG_REPORT, CallReport, encode, report_decoder
from mtguard_rt.agent.report import call_report
from mtguard_rt.model import (
    AuditRecord,
    BehaviorTree,
    DeclaredCall,
    ProcessNode,
    Timings,
    Violation,
)

STATUS = {
    "uptime_s": 12.5, "connections": 2, "watched_cgroups": 3, "programs": 1,
    "events_total": 900, "events_unrouted": 4, "connections_total": 5,
    "drops": {"ring": 7}, "lost_by_connection": 2,
}  # fmt: skip
SAMPLE = re.compile(r'^[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$')


def report(**kw: Any) -> CallReport:
    base: dict[str, Any] = {
        "server": "git", "decision": "allow", "mode": "enforce",
        "stages_ms": {"pre": 0.3, "settle": 4.0, "post": 0.2, "total": 30.0},
    }  # fmt: skip
    return CallReport(**{**base, **kw})


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        assert SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_reports_are_counted_by_decision_rule_kill_rollback_and_stage() -> None:
    met = m.AgentMetrics()
    met.observe(report())
    met.observe(report(
        decision="deny", violations=[("sensitive-file-arg", "pre", "enforce")],
        kills=["online-rule", "kill-on-touch"], rollback="restored",
        stages_ms={"pre": 3.0, "total": 3.5},
    ))  # fmt: skip
    met.observe(report(decision="deny", between=True, stages_ms={}))
    got = samples(met.render(STATUS))
    assert got['mtguard_calls_total{server="git",decision="allow",mode="enforce"}'] == 1
    key = 'mtguard_between_records_total{server="git",decision="deny",mode="enforce"}'
    assert got[key] == 1  # not a call
    assert got['mtguard_calls_total{server="git",decision="deny",mode="enforce"}'] == 1
    assert got['mtguard_denials_total{mode="enforce"}'] == 2
    assert got['mtguard_denials_total{mode="observe"}'] == 0  # there from the start
    key = 'mtguard_rule_violations_total{rule="sensitive-file-arg",phase="pre",mode="enforce"}'
    assert got[key] == 1
    assert got['mtguard_kills_total{by="online-rule"}'] == 1
    assert got['mtguard_rollbacks_total{action="restored"}'] == 1
    assert got['mtguard_audit_stage_ms_count{stage="pre"}'] == 2
    assert got['mtguard_audit_stage_ms_sum{stage="pre"}'] == pytest.approx(3.3)
    assert got['mtguard_audit_stage_ms_bucket{stage="pre",le="0.5"}'] == 1
    assert got['mtguard_audit_stage_ms_bucket{stage="pre",le="5"}'] == 2
    assert got['mtguard_audit_stage_ms_bucket{stage="pre",le="+Inf"}'] == 2
    assert got["mtguard_agent_sandboxes"] == 3 and got["mtguard_agent_events_total"] == 900
    assert got['mtguard_agent_events_lost_total{kind="ring"}'] == 7
    assert got['mtguard_agent_events_lost_total{kind="agent_backlog"}'] == 2


def test_label_values_are_escaped_and_label_sets_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(m, "MAX_SERIES", 3)
    met = m.AgentMetrics()
    met.observe(report(server='we"ird\\name\nx'))
    for i in range(10):  # a peer inventing servers cannot grow the agent's memory
        met.observe(report(server=f"s{i}"))
    text = met.render(STATUS)
    assert 'server="we\\"ird\\\\name\\nx"' in text
    assert len(met.calls.values) == 4  # three named, then "other"
    assert samples(text)['mtguard_calls_total{server="other",decision="other",mode="other"}'] == 8


def test_a_report_is_built_from_an_audit_record_without_its_content() -> None:
    call = DeclaredCall(call_id="c1", server="term", tool="run_command")
    tree = BehaviorTree(call=call, processes=[
        ProcessNode(key="1@1", pid=1, killed_by="kill-on-touch: /root/.ssh/id_rsa"),
        ProcessNode(key="2@1", pid=2, killed_by="persistence-write"),
        ProcessNode(key="3@1", pid=3),
    ])  # fmt: skip
    rec = AuditRecord(
        call_id="c1", server="term", tool="run_command", arguments={"command": "secret"},
        decision="deny", phase="post", rules=["persistence-write"], reasons=["x"],
        mode="enforce", timings_ms=Timings(pre=1.0, settle=2.0, post=3.0, total=9.0),
        tree_complete=True, llm_used=False, tree=tree,
        violations=[Violation(rule="persistence-write", phase="post", mode="enforce", reason="x")],
    )  # fmt: skip
    rep = call_report(rec)
    assert rep.kills == ["kill-on-touch", "online-rule"]
    assert rep.violations == [("persistence-write", "post", "enforce")]
    assert rep.stages_ms == {"pre": 1.0, "settle": 2.0, "post": 3.0, "total": 9.0}
    wire = encode(TAG_REPORT, rep)
    assert b"secret" not in wire and report_decoder.decode(wire[5:]) == rep


@pytest.mark.parametrize("bad", ["9464", "localhost:", ":9464", "h:-1", "h:70000", "h:x"])
def test_a_bad_metrics_address_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        m.parse_address(bad)
    assert m.parse_address("[::1]:9464") == ("::1", 9464)


def _ask(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.anyio
async def test_the_endpoint_answers_metrics_refuses_the_rest_and_drops_silent_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(m, "REQUEST_TIMEOUT_S", 0.3)
    met = m.AgentMetrics()
    met.observe(report())
    async with anyio.create_task_group() as tg:
        port = await tg.start(m.serve_metrics, ("127.0.0.1", 0), lambda: met.render(STATUS))
        ok = await anyio.to_thread.run_sync(_ask, port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = ok.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"version=0.0.4" in head
        assert b'mtguard_calls_total{server="git"' in body
        assert f"Content-Length: {len(body)}".encode() in head
        other = await anyio.to_thread.run_sync(_ask, port, b"GET / HTTP/1.1\r\n\r\n")
        assert other.startswith(b"HTTP/1.1 404")
        junk = await anyio.to_thread.run_sync(_ask, port, b"x" * 9000 + b"\r\n\r\n")
        assert junk.startswith(b"HTTP/1.1 400")
        silent = await anyio.to_thread.run_sync(_ask, port, b"GET /metr")  # never finishes
        assert silent == b""  # cut after the timeout, no answer
        again = await anyio.to_thread.run_sync(_ask, port, b"GET /metrics HTTP/1.0\r\n\r\n")
        assert again.startswith(b"HTTP/1.1 200")  # the endpoint served on
        tg.cancel_scope.cancel()
