"""simplify() with the shipped noise rules, and noise-file validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_monitor_replay import tree_of

from mtguard_rt.errors import PolicyError
from mtguard_rt.model import BehaviorTree, DeclaredCall, FileEvent, NetEvent, ProcessNode
from mtguard_rt.monitor.simplify import load_noise, simplify


def test_shipped_rules_drop_loader_and_import_noise_keep_effects() -> None:
    raw = tree_of("files_chdir_dirfd")
    small = simplify(raw, load_noise())
    raw_files = [f for p in raw.processes for f in p.files]
    kept = [f for p in small.processes for f in p.files]
    assert len(kept) < len(raw_files)
    assert not any(f.path.endswith(".so.6") or "/site-packages/" in f.path for f in kept)
    assert [
        (f.op, f.path)
        for f in raw_files
        if f.op != "open" or "read" not in f.flags or len(f.flags) > 1
    ] == [
        (f.op, f.path) for f in kept if f.op != "open" or "read" not in f.flags or len(f.flags) > 1
    ]  # every write/create/unlink/... stays
    assert small.omitted["file_read_noise"] == len(raw_files) - len(kept)
    assert [p.key for p in small.processes] == [p.key for p in raw.processes]
    assert [p.argv for p in small.processes] == [p.argv for p in raw.processes]
    # the raw tree is untouched
    assert [f for p in raw.processes for f in p.files] == raw_files


def test_reads_of_secrets_and_non_loopback_traffic_are_never_noise() -> None:
    node = ProcessNode(
        key="1@1",
        pid=1,
        files=[
            FileEvent(ts_ns=1, op="open", path="/home/u/.ssh/id_rsa", flags=["read"]),
            FileEvent(
                ts_ns=2,
                op="open",
                path="/usr/lib/x86_64-linux-gnu/libc.so.6",
                flags=["read", "write"],
            ),
            FileEvent(
                ts_ns=3, op="open", path="/usr/lib/x86_64-linux-gnu/libc.so.6", flags=["read"]
            ),
        ],
        net=[
            NetEvent(ts_ns=4, op="connect", family="ipv4", address="127.0.0.1", port=8080),
            NetEvent(ts_ns=5, op="connect", family="ipv4", address="203.0.113.5", port=443),
            NetEvent(ts_ns=6, op="connect", family="ipv6", address="::1", port=22),
        ],
    )
    tree = BehaviorTree(call=DeclaredCall(call_id="c", server="s", tool="t"), processes=[node])
    small = simplify(tree, load_noise())
    assert [f.ts_ns for f in small.processes[0].files] == [1, 2]
    assert [n.address for n in small.processes[0].net] == ["203.0.113.5"]
    assert small.omitted == {"file_read_noise": 1, "loopback": 2}


def test_noise_file_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "noise.toml"
    bad.write_text('[files]\nread_globs = ["*.pyc"]\n\n[net]\ndrop_lopback = true\n')
    with pytest.raises(PolicyError) as exc:
        load_noise(bad)
    assert exc.value.path == str(bad) and exc.value.line == 5 and "drop_lopback" in str(exc.value)
    bad.write_text("[files\n")
    with pytest.raises(PolicyError) as exc:
        load_noise(bad)
    assert exc.value.line == 1



def test_the_stdio_capture_is_evidence_not_part_of_the_compact_tree() -> None:
    from mtguard_rt.model import StdioCapture, StdioMessage

    raw = tree_of("files_chdir_dirfd")
    secret = "/home/agent/.ssh/id_rsa"
    request = StdioMessage(
        ts_ns=1, pid=7, method="tools/call", id=1, tool="read", arguments={"path": secret}
    )
    raw.stdio = StdioCapture(requests=[request])
    small = simplify(raw, load_noise())
    assert small.stdio is None and secret not in repr(small)
    assert raw.stdio is not None and raw.stdio.requests == [request]  # the rules still have it
