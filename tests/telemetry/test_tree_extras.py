"""What the newer trees carry, in every viewer: workers, between-call activity, refusals,
the network policy; and a call whose server died reads as an error, not ALLOW.

Text (`render_text`), the HTML report's data block, and the OTel spans are each checked on
the same record, and the same record without those fields shows none of them.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import StatusCode

from mtguard_rt.model import (
    AuditRecord,
    BehaviorTree,
    DeclaredCall,
    FileEvent,
    NetEvent,
    ProcessNode,
)
from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id
from mtguard_rt.telemetry.view_html import render_html
from mtguard_rt.telemetry.view_text import render_text
from mtguard_rt.telemetry.viewtree import outcome

from .fixtures import MONO_T0, MS, OFFSET, allowed_record, denied_record
from .test_viewers import page_data, walk

RESOURCE = Resource.create({"service.name": "test"})
HELPER = "/usr/lib/git-core/git-fsmonitor--daemon"
DIED = "mtguard: the server exited (code 1) before answering"


def extras_record() -> AuditRecord:
    record = allowed_record()
    tree = record.tree
    assert tree is not None
    helper = ProcessNode(key=f"300@{MONO_T0 + 51 * MS}", pid=300, ppid=100, parent="100@1",
                         exe="/usr/bin/git", argv=["git", "credential-cache--daemon"],
                         start_ns=MONO_T0 + 51 * MS, still_running=True,
                         net=[NetEvent(ts_ns=MONO_T0 + 52 * MS, op="connect", family="ipv4",
                                       address="203.0.113.9", port=443, transport="tcp",
                                       result=-1, refused=1)])
    tree.processes.append(helper)
    tree.workers = [helper.key]
    tree.network_policy = ["api.example.org"]
    tree.refused = [NetEvent(ts_ns=MONO_T0 + 52 * MS, op="send", family="ipv4",
                             address="198.51.100.7", port=53, transport="udp", refused=3)]
    earlier = ProcessNode(key="250@5", pid=250, ppid=100, exe=HELPER, argv=[HELPER],
                          start_ns=MONO_T0 + 10 * MS, still_running=True,
                          files=[FileEvent(ts_ns=MONO_T0 + 20 * MS, op="open",
                                           path="/ws/.git/fsmonitor", flags=["read"])])
    tree.between = BehaviorTree(
        call=DeclaredCall(call_id="5", server="notes", tool="status"), processes=[earlier],
        window_start_ns=MONO_T0 + 10 * MS, window_end_ns=MONO_T0 + 49 * MS,
        wall_offset_ns=OFFSET,
    )
    return record


def died_record() -> AuditRecord:
    record = allowed_record("11")
    record.reasons.append(DIED)
    return record


def test_outcome_tells_a_dead_server_from_an_answer() -> None:
    assert outcome(allowed_record()) == ("allow", "")
    assert outcome(denied_record())[0] == "deny"
    assert outcome(died_record()) == ("error", DIED.removeprefix("mtguard: "))
    killed = allowed_record()
    killed.terminated = True
    assert outcome(killed) == ("error", "terminated online")
    rolled = allowed_record()  # a reason of the guard's that is not a lost answer
    rolled.reasons.append("workspace rollback failed: disk full")
    assert outcome(rolled) == ("allow", "")


def test_text_view_shows_workers_between_refusals_and_policy() -> None:
    text = render_text([extras_record()])
    assert "network policy: only api.example.org" in text
    assert "refused by network policy: 4 attempt(s)/packet(s)" in text
    assert "workers left running: 1 (300@" in text
    (worker,) = [line for line in text.splitlines() if "git credential-cache--daemon" in line]
    assert "worker: still running after the call" in worker
    assert "connect tcp 203.0.113.9:443, refused by network policy" in text
    assert "send udp 198.51.100.7:53, refused by network policy (3 times)" in text
    assert "between calls: 1 process(es), since call 5 (status)" in text
    after = text.split("between calls (workers of earlier calls):", 1)[1]
    assert HELPER in after and "open /ws/.git/fsmonitor" in after
    plain = render_text([allowed_record()])
    assert "network policy" not in plain and "between calls" not in plain
    assert "workers" not in plain


def test_text_view_shows_a_dead_server_as_error() -> None:
    text = render_text([died_record(), allowed_record()])
    first = text.splitlines()[0]
    assert first.startswith("ERROR tools/call list_notes") and "ALLOW" not in first
    assert "✗ no result: the server exited (code 1) before answering" in text
    assert "2 calls · 0 denied · 1 allowed · 1 failed (server died)" in text


def test_html_data_carries_the_same() -> None:
    page = render_html([extras_record(), died_record()])
    data, s = page_data(page), page_data(page)["s"]
    call = data["c"][0]
    facts = [s[i] for i in call["f"]]
    assert "network policy: only api.example.org" in facts
    assert any(f.startswith("between calls: 1 process(es)") for f in facts)
    kinds = [s[n[0]] for n in walk(data, 0)]
    assert kinds.count("refused") == 2
    assert [s[n[1]] for n in walk(data, 0, "b") if s[n[0]] == "process"] == [HELPER]
    assert s[data["c"][1]["x"]] == "the server exited (code 1) before answering"
    assert '<span class="badge error">ERROR</span>' in page
    assert "1 failed (server died)" in page and "x" not in call


def test_spans_carry_the_same() -> None:
    spans = SpanBuilder(RESOURCE).build(extras_record(), new_trace_id())
    (ex,) = [sp for sp in spans if sp.name == "execution"]
    attrs = dict(ex.attributes or {})
    assert attrs["mtguard.network.policy"] == ("api.example.org",)
    assert attrs["mtguard.network.refused"] == 4
    assert attrs["mtguard.tree.workers"] == (f"300@{MONO_T0 + 51 * MS}",)
    assert attrs["mtguard.between.processes"] == 1 and attrs["mtguard.between.since_call"] == "5"
    names = [e.name for e in ex.events]
    assert "network.refused" in names and "mtguard.between.process" in names
    assert "mtguard.between.file.open" in names
    (between,) = [e for e in ex.events if e.name == "mtguard.between.process"]
    assert (between.attributes or {})["process.executable.path"] == HELPER
    assert between.timestamp == MONO_T0 + 10 * MS + OFFSET
    (helper,) = [sp for sp in spans if sp.name == "process git"]
    assert (helper.attributes or {})["mtguard.process.worker"] is True
    (connect,) = helper.events
    assert (connect.attributes or {})["mtguard.network.refused"] == 1
    plain = SpanBuilder(RESOURCE).build(allowed_record(), new_trace_id())
    (ex,) = [sp for sp in plain if sp.name == "execution"]
    assert not any(k.startswith(("mtguard.between", "mtguard.network"))
                   for k in (ex.attributes or {}))


def test_spans_mark_a_dead_server_call_as_error() -> None:
    spans = SpanBuilder(RESOURCE).build(died_record(), new_trace_id())
    (root,) = [sp for sp in spans if sp.name.startswith("tools/call")]
    assert root.status.status_code is StatusCode.ERROR
    assert (root.attributes or {})["mtguard.outcome"] == "error"
    assert (root.attributes or {})["error.type"] == "mtguard.no_result"
    ok = SpanBuilder(RESOURCE).build(allowed_record(), new_trace_id())
    (root,) = [sp for sp in ok if sp.name.startswith("tools/call")]
    assert root.status.status_code is StatusCode.UNSET
    assert (root.attributes or {})["mtguard.outcome"] == "allow"
