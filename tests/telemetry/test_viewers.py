"""`mtguard view`: filters, terminal tree, evidence marks, hostile content, self-contained HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.cli import main
from mtguard_rt.model import ProcessNode, Violation
from mtguard_rt.telemetry import AuditLog
from mtguard_rt.telemetry.view_html import render_html
from mtguard_rt.telemetry.view_text import render_text
from mtguard_rt.telemetry.viewtree import MAX_DEPTH, EvidenceIndex, build_view

from .fixtures import SSH_KEY, allowed_record, denied_record, pre_denied_record

HOSTILE = "<script>alert(1)</script>\x1b[2J"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as audit:
        for r in (denied_record(), allowed_record(), pre_denied_record()):
            audit.write_sync(r)
    return path


def view(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["view", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_filters(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = view(capsys, str(log))
    assert [line.split()[2] for line in out.splitlines() if line.startswith(("ALLOW", "DENY"))] == [
        "read_note", "list_notes", "send_email"
    ]
    assert out.splitlines()[-1] == "3 calls · 2 denied · 1 allowed"
    _, out, _ = view(capsys, str(log), "--denied")
    assert "list_notes" not in out and "read_note" in out and "send_email" in out
    _, out, _ = view(capsys, str(log), "--denied", "--tool", "send_email")
    assert "read_note" not in out and "shadowed-tool" in out
    _, out, _ = view(capsys, str(log), "--call", "8")
    assert out.startswith("ALLOW tools/call list_notes") and "INCOMPLETE" in out
    _, by_request, _ = view(capsys, str(log), "--call", "req-8")
    assert by_request == out
    code, out, err = view(capsys, str(log), "--call", "nope")
    assert (code, out, err) == (0, "", "no matching calls\n")


def test_terminal_tree_nests_processes_and_marks_evidence(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = view(capsys, str(log), "--call", "7", "--no-color")
    assert "\x1b[" not in out
    lines = [line for line in out.splitlines() if "── " in line]  # the tree only
    cat = next(i for i, line in enumerate(lines) if "[pid 102, exit 0]" in line)
    sh = next(i for i, line in enumerate(lines) if "[pid 101, exit 0]" in line)
    indent = lambda s: len(s) - len(s.lstrip(" │├└─"))  # noqa: E731
    assert indent(lines[cat]) > indent(lines[sh])  # cat nests under sh
    assert lines[cat].endswith("◀ secret-file-read")
    marks = {line.split("── ", 1)[1].split("  ")[0]: line.endswith("◀ secret-file-read")
             for line in lines}
    # kernel time relative to the call's window: the key was read 3.2 ms in
    assert marks[f"+3.2ms open {SSH_KEY}"] and not marks["+3.1ms open /etc/ld.so.cache"]
    assert next(line for line in lines if "connect 127.0.0.1:8080" in line).endswith(
        "◀ undeclared-egress"
    )
    _, coloured, _ = view(capsys, str(log), "--call", "7", "--color")
    assert "\x1b[1;31mDENY\x1b[0m" in coloured


def test_malformed_log_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("not json\n")
    code, _, err = view(capsys, str(path))
    assert code == 2 and err.startswith(f"mtguard: error: {path}:1: not an audit record")


def test_evidence_matches_on_token_boundaries() -> None:
    index = EvidenceIndex([Violation(rule="r", phase="post", mode="enforce", reason="",
                                     evidence=["pid 10 read /etc/shadow", "key 77@123"])])
    assert index.mentions("/etc/shadow") == ["r"]
    assert index.mentions("/etc/shadow.bak", "/etc/sha") == []
    assert index.process(ProcessNode(key="10@5", pid=10)) == ["r"]
    assert index.process(ProcessNode(key="77@123", pid=77)) == ["r"]
    assert index.process(ProcessNode(key="1@5", pid=1)) == []  # "pid 10" does not name pid 1


def test_hostile_content_is_escaped_and_stripped() -> None:
    record = denied_record()
    assert record.tree is not None
    record.tree.processes[2].argv = ["cat", HOSTILE]
    record.violations[0].evidence.append(HOSTILE)
    text = render_text([record], color=True)
    assert "\x1b[2J" not in text and "?[2J" in text
    page = render_html([record])
    assert "<script>alert(1)" not in page and "\\u003cscript\\u003ealert(1)" in page
    assert HOSTILE in page_data(page)["s"]  # intact as data: the page sets it as text


def test_html_is_self_contained() -> None:
    page = render_html([denied_record(), allowed_record(), pre_denied_record()], source="a.jsonl")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page
    assert page.count('<section id="call-') == 3
    data = page_data(page)
    hits = [n for n in walk(data, 0) if data["s"][n[0]] == "file" and n[6]]
    assert [data["s"][n[1]] for n in hits] == [f"open {SSH_KEY}"]  # not ld.so.cache


def page_data(page: str) -> dict[str, Any]:
    """The report's JSON data block, decoded."""
    match = re.search(r'<script type="application/json" id="mtguard-data">(.*?)</script>',
                      page, re.DOTALL)
    assert match, "no data block"
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def walk(data: dict[str, Any], call: int, key: str = "t") -> list[list[Any]]:
    """Every node of one call's tree (`t`) or between-call tree (`b`) in the data block."""
    out, stack = [], list(data["c"][call][key])
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node[7])
    return out


def test_deep_fork_chain_is_cut_not_recursed() -> None:
    record = allowed_record()
    assert record.tree is not None
    chain = [ProcessNode(key=f"{i}@{i}", pid=i, parent=f"{i - 1}@{i - 1}" if i else None,
                         start_ns=i) for i in range(MAX_DEPTH * 3)]
    record.tree.processes = chain
    nodes = build_view(record)
    depth, node = 0, nodes[0]
    while node.children:
        node, depth = node.children[0], depth + 1
    assert depth == MAX_DEPTH + 1 and node.kind == "note"
    assert "deeper" in render_text([record])


def test_compact_view_hides_noise_but_keeps_the_key_read(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, full, _ = view(capsys, str(log), "--call", "7", "--no-color")
    _, compact, _ = view(capsys, str(log), "--call", "7", "--no-color", "--compact")
    assert "open /etc/ld.so.cache" in full and "open /etc/ld.so.cache" not in compact
    assert f"open {SSH_KEY}" in compact and "◀ secret-file-read" in compact


def test_html_holds_each_string_once_and_bodies_lazily() -> None:
    """51 calls touching the same key: each string naming it is in the page once; each call
    past the first costs its row, summary and small node arrays (~1.3 KB), not its tree."""
    one = render_html([denied_record("0")])
    many = render_html([denied_record(str(i)) for i in range(51)])
    assert many.count(SSH_KEY) == one.count(SSH_KEY) > 0  # label, evidence: each once
    assert (len(many.encode()) - len(one.encode())) / 50 < 2000
    assert 'class="node' not in many  # no tree markup is sent: the script builds it on open
    data = page_data(many)
    assert len(data["c"]) == 51 and data["c"][0]["t"] == data["c"][50]["t"]
