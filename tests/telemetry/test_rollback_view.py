"""What the viewers and `explain` say about a call's workspace rollback (record fixtures)."""

from __future__ import annotations

from mtguard_rt.model import AuditRecord, RollbackReport, Timings
from mtguard_rt.telemetry.explain import explain_record, rollback_lines
from mtguard_rt.telemetry.view_html import render_html
from mtguard_rt.telemetry.view_text import render_text

from .test_viewers import page_data


def record(rollback: RollbackReport | None) -> AuditRecord:
    return AuditRecord(
        call_id="s-1",
        server="s",
        tool="run_command",
        arguments={},
        decision="deny",
        phase="post",
        rules=["canary-touched"],
        reasons=[],
        mode="enforce",
        timings_ms=Timings(total=5.0),
        tree_complete=True,
        llm_used=False,
        tree=None,
        rollback=rollback,
    )


def test_a_restore_and_a_failure_are_shown() -> None:
    paths = [f"/ws/f{i}" for i in range(12)]
    ok = RollbackReport(mode="scan", action="restored", workspace="/ws", paths=paths)
    ok.created, ok.modified, ok.deleted, ok.unlisted, ok.synced, ok.ms = 10, 4, 1, 3, 2, 3.25
    lines = rollback_lines(record(ok))
    assert lines[0] == (
        "workspace rollback (scan): restored, the workspace is back as it was before the call: "
        "10 created, 4 modified, 1 deleted, 3.2 ms"
    )
    assert lines[1].startswith("  paths: /ws/f0, /ws/f1,") and lines[1].endswith("(+5 more)")
    assert lines[2] == "  2 entries changed between calls, taken as the baseline"
    bad = RollbackReport(mode="tree", action="failed", workspace="/ws", modified=1,
                         error="1 of 2 changed entries could not be restored",
                         failed=["/ws/notes\x1b[31m.txt: Operation not permitted"],
                         fallback="the monitor lost events ({'file': 3})")  # fmt: skip
    shown = explain_record(record(bad))
    assert "workspace rollback (tree): FAILED: 0 created, 1 modified, 0 deleted" in shown
    assert "  not restored: /ws/notes?[31m.txt: Operation not permitted" in shown  # no escapes
    assert "  scanned the whole workspace: the monitor lost events" in shown
    assert "error: 1 of 2 changed entries could not be restored" in render_text([record(bad)])
    data = page_data(render_html([record(bad)]))
    assert data["s"][data["c"][0]["r"]].startswith("workspace rollback (tree): FAILED")
    assert rollback_lines(record(None)) == [] and "rollback" not in explain_record(record(None))


def test_spans_carry_the_rollback_outcome_without_paths() -> None:
    from opentelemetry.sdk.resources import Resource

    from mtguard_rt.telemetry.spans import SpanBuilder, new_trace_id

    from .fixtures import denied_record

    rec = denied_record()
    rec.rollback = RollbackReport(mode="tree", action="failed", workspace="/ws", paths=["/ws/a"],
                                  modified=1, created=2, error="1 of 3 ...", ms=1.5)  # fmt: skip
    spans = SpanBuilder(Resource.create({"service.name": "t"})).build(rec, new_trace_id())
    (root,) = [sp for sp in spans if sp.parent is None]
    attrs = dict(root.attributes or {})
    assert attrs["mtguard.rollback.action"] == "failed"
    assert (attrs["mtguard.rollback.changed"], attrs["mtguard.rollback.ms"]) == (3, 1.5)
    assert attrs["mtguard.rollback.error"] == "1 of 3 ..."
    assert not any("/ws/a" in str(v) for v in attrs.values())
