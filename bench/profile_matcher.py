"""Benchmark the learned-profile matcher: µs per call to check a tree against its profile.

Usage: .venv/bin/python bench/profile_matcher.py [--iterations N] [--events N,...]
           [--audit-log PATH]

A profile is learned from 20 synthetic calls of a Python MCP server (a seeded interpreter
with N start-up file events: libraries, site-packages, /proc, workspace files; a helper
child; a connection and a DNS lookup), then `CompiledProfile.deviations` checks fresh trees
of the same shape (new pids, temp names and workspace files: the per-path cache is warm for
shared paths only, as in use) and one with an attack added (a shell, a key read, an
endpoint). `--audit-log` also times every allowed call of a real log against the profile
learned from that log (the profile contains the call: the all-clear path, the common case).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtguard_rt.audit.profile import CompiledProfile, learn_profiles
from mtguard_rt.model import (
    AuditRecord,
    BehaviorTree,
    DeclaredCall,
    DnsEvent,
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
    Timings,
)
from mtguard_rt.telemetry.auditlog import read_audit_log


def build_tree(n: int, events: int, attack: bool = False) -> BehaviorTree:
    files = []
    for i in range(events):
        k = i % 5
        path = (
            f"/usr/lib/x86_64-linux-gnu/lib{i % 97}.so.1"
            if k == 0
            else f"/opt/venv/lib/python3.11/site-packages/pkg{i % 89}/__init__.py"
            if k == 1
            else f"/proc/{1000 + n}/fd/{i % 64}"
            if k == 2
            else f"/usr/lib/python3.11/encodings/e{i % 53}.cpython-311.pyc"
            if k == 3
            else f"/workspace/data/file{(i + n) % 41}.csv"
        )
        files.append(FileEvent(ts_ns=i, op="open", path=path, flags=["read"], result=3))
    files.append(FileEvent(ts_ns=0, op="open", path=f"/tmp/tmp{n}k{n}x_z9q", flags=["write"]))
    server = ProcessNode(
        key="100@1",
        pid=100,
        exe="/usr/bin/python3.11",
        cwd="/workspace",
        learned="seeded",
        files=files,
    )
    helper = ProcessNode(
        key=f"{200 + n}@2",
        pid=200 + n,
        parent="100@1",
        exe="/usr/bin/gzip",
        argv=["gzip", "-c"],
        execs=[ExecEvent(ts_ns=1, path="/usr/bin/gzip", argv=["gzip"])],
        net=[NetEvent(ts_ns=1, op="connect", family="ipv4", address="10.0.0.5", port=443)],
        dns=[DnsEvent(ts_ns=1, direction="query", name="api.example.com")],
    )
    procs = [server, helper]
    if attack:
        procs.append(
            ProcessNode(
                key="999@3",
                pid=999,
                parent="100@1",
                exe="/bin/sh",
                argv=["sh", "-c", "x"],
                execs=[ExecEvent(ts_ns=1, path="/bin/sh", argv=["sh"])],
                files=[FileEvent(ts_ns=1, op="open", path="/home/u/.ssh/id_rsa", flags=["read"])],
                net=[
                    NetEvent(ts_ns=1, op="connect", family="ipv4", address="203.0.113.9", port=443)
                ],
            )
        )
    call = DeclaredCall(call_id=f"c{n}", server="srv", tool="query", arguments={"q": f"x{n}"})
    return BehaviorTree(call=call, processes=procs)


def record(tree: BehaviorTree) -> AuditRecord:
    c = tree.call
    return AuditRecord(
        call_id=c.call_id,
        server=c.server,
        tool=c.tool,
        arguments=c.arguments,
        decision="allow",
        phase=None,
        rules=[],
        reasons=[],
        mode="enforce",
        timings_ms=Timings(),
        tree_complete=True,
        llm_used=False,
        tree=tree,
    )


def timed(
    profile: CompiledProfile, trees: list[BehaviorTree]
) -> tuple[list[float], list[float], int]:
    """(CPU µs per call: thread time, robust to a busy machine; wall µs; calls flagged)."""
    cpu, wall, flagged = [], [], 0
    for t in trees:
        c0, w0 = time.thread_time(), time.perf_counter()
        found = profile.deviations(t.call.server, t.call.tool, t, t.call.arguments)
        wall.append((time.perf_counter() - w0) * 1e6)
        cpu.append((time.thread_time() - c0) * 1e6)
        flagged += bool(found)
    return cpu, wall, flagged


def show(label: str, cpu: list[float], wall: list[float], flagged: int) -> None:
    def p(xs: list[float], q: float) -> float:
        return sorted(xs)[int(q * (len(xs) - 1))]

    print(
        f"| {label} | {p(cpu, 0.5):.0f} | {p(cpu, 0.95):.0f} | {p(wall, 0.5):.0f} | "
        f"{p(wall, 0.95):.0f} | {flagged}/{len(cpu)} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--events", default="250,2000,20000")
    ap.add_argument("--audit-log", metavar="PATH")
    args = ap.parse_args()
    print("| trees | CPU p50 µs | CPU p95 µs | wall p50 µs | wall p95 µs | flagged |")
    print("|---|---|---|---|---|---|")
    for events in (int(e) for e in args.events.split(",")):
        spec, _ = learn_profiles([record(build_tree(n, events)) for n in range(20)])
        profile = CompiledProfile(spec)
        n = max(20, args.iterations * 250 // max(events, 250))
        show(
            f"{events} file events, benign",
            *timed(profile, [build_tree(100 + i, events) for i in range(n)]),
        )
        show(
            f"{events} file events, attacked",
            *timed(profile, [build_tree(100 + i, events, attack=True) for i in range(n)]),
        )
    if args.audit_log:
        records = [
            r
            for r in read_audit_log(args.audit_log)
            if r.decision == "allow" and r.tree is not None
        ]
        spec, _ = learn_profiles(records)
        profile = CompiledProfile(spec)
        sizes = [sum(len(p.files) for p in r.tree.processes) for r in records if r.tree]
        cpu, wall, flagged = timed(profile, [r.tree for r in records if r.tree])
        show(
            f"audit log: {len(cpu)} allowed calls (events: median "
            f"{statistics.median(sizes):.0f}, max {max(sizes)})",
            cpu,
            wall,
            flagged,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
