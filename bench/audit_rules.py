"""Benchmark the audit rules: p50/p95 of pre_audit and post_verify (no judge).

Usage: .venv/bin/python bench/audit_rules.py [--iterations N] [--events N] [--write]
The tree is what a guarded call to a Python MCP server looks like: a seeded interpreter
with a few hundred start-up file events, a shell child running the declared command, DNS
and connections. `--write` refreshes bench/AUDIT_RESULTS.md with the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtguard_rt.audit import CallContext, PolicyEngine, load_policy
from mtguard_rt.model import (
    BehaviorTree,
    DeclaredCall,
    DnsEvent,
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
)

HOME = "/home/mtguard"


def build_tree(call: DeclaredCall, events: int) -> BehaviorTree:
    files = []
    for i in range(events):
        if i % 5 == 0:
            path = f"/usr/lib/x86_64-linux-gnu/lib{i}.so.1"
        elif i % 5 == 1:
            path = f"/opt/venv/lib/python3.11/site-packages/pkg{i}/__init__.py"
        elif i % 5 == 2:
            path = f"/proc/self/fd/{i}"
        elif i % 5 == 3:
            path = f"/usr/lib/python3.11/encodings/e{i}.cpython-311.pyc"
        else:
            path = f"/workspace/src/module{i}.py"
        files.append(FileEvent(ts_ns=i, op="open", path=path, flags=["read"], result=3))
    server = ProcessNode(
        key="100@1",
        pid=100,
        exe="/usr/bin/python3.11",
        argv=["python3", "-m", "server"],
        learned="seeded",
        still_running=True,
        files=files,
    )
    server.dns = [
        DnsEvent(ts_ns=1, direction="query", name="api.github.com"),
        DnsEvent(ts_ns=2, direction="response", name="api.github.com", answers=["140.82.112.6"]),
    ]
    server.net = [NetEvent(ts_ns=3, op="connect", family="ipv4", address="140.82.112.6", port=443)]
    sh = ProcessNode(
        key="200@5",
        pid=200,
        ppid=100,
        parent="100@1",
        exe="/usr/bin/dash",
        argv=["/bin/sh", "-c", "git log -n 5 | wc -l"],
        execs=[
            ExecEvent(ts_ns=5, path="/usr/bin/dash", argv=["/bin/sh", "-c", "git log -n 5 | wc -l"])
        ],
    )
    git = ProcessNode(
        key="201@6",
        pid=201,
        ppid=200,
        parent="200@5",
        exe="/usr/bin/git",
        argv=["git", "log", "-n", "5"],
        execs=[ExecEvent(ts_ns=6, path="/usr/bin/git", argv=["git", "log", "-n", "5"])],
        files=[
            FileEvent(
                ts_ns=7 + i, op="open", path=f"/workspace/.git/objects/{i:02x}", flags=["read"]
            )
            for i in range(40)
        ],
    )
    wc = ProcessNode(
        key="202@8",
        pid=202,
        ppid=200,
        parent="200@5",
        exe="/usr/bin/wc",
        argv=["wc", "-l"],
        execs=[ExecEvent(ts_ns=8, path="/usr/bin/wc", argv=["wc", "-l"])],
    )
    return BehaviorTree(call=call, processes=[server, sh, git, wc])


def build_ctx(i: int) -> CallContext:
    call = DeclaredCall(
        call_id=f"c{i}",
        server="dev",
        tool="run_command",
        arguments={"command": "git log -n 5 | wc -l", "cwd": "/workspace"},
    )
    recent = [
        DeclaredCall(
            call_id=f"r{j}", server="dev", tool="run_command", arguments={"command": f"ls {j}"}
        )
        for j in range(20)
    ]
    return CallContext(
        call=call,
        task="Show how many of the last 5 commits touch https://api.github.com integration code",
        history=[{"role": "user", "content": "check the repo history"}],
        input_schema={
            "type": "object",
            "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}},
        },
        tools_by_server={"dev": ["run_command", "read_file"], "web": ["fetch", "search"]},
        recent_calls=recent,
        canaries={
            f"{HOME}/.ssh/id_rsa": "M1-ssh",
            f"{HOME}/.aws/credentials": "M2-aws",
            f"{HOME}/.env": "M3-env",
            f"{HOME}/.bashrc": "M4-rc",
        },
    )


def pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


Samples = dict[str, list[float]]


async def measure(iterations: int, events: int, cold: bool) -> tuple[Samples, Samples]:
    """(wall µs, thread-CPU µs) per stage. `cold` forgets the per-path verdict cache."""
    engine = PolicyEngine(load_policy())
    result = {"content": [{"type": "text", "text": "5\n"}]}
    wall: Samples = {"pre_audit": [], "post_verify": [], "both": []}
    cpu: Samples = {"pre_audit": [], "post_verify": [], "both": []}
    for i in range(iterations + 50):
        ctx = build_ctx(i)  # a fresh context per call, as the supervisor builds one
        tree = build_tree(ctx.call, events)
        if cold:
            engine.policy._classes.clear()
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        pre = await engine.pre_audit(ctx)
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        post = await engine.post_verify(ctx, tree, result)
        c2, t2 = time.thread_time_ns(), time.perf_counter_ns()
        assert pre.decision == "allow" and post.decision == "allow", (pre, post)
        if i >= 50:  # warm-up discarded
            for out, (a, b, c) in ((wall, (t0, t1, t2)), (cpu, (c0, c1, c2))):
                out["pre_audit"].append((b - a) / 1e3)
                out["post_verify"].append((c - b) / 1e3)
                out["both"].append((c - a) / 1e3)
    return wall, cpu


def table(label: str, wall: Samples, cpu: Samples) -> str:
    rows = [
        f"| {label} | {k} | {pct(cpu[k], 50):.0f} | {pct(cpu[k], 95):.0f} "
        f"| {pct(v, 50):.0f} | {pct(v, 95):.0f} |"
        for k, v in wall.items()
    ]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    head = "| path cache | stage | CPU p50 µs | CPU p95 µs | wall p50 µs | wall p95 µs |"
    lines = [head, "|---|---|---|---|---|---|"]
    for label, cold in (("warm", False), ("cold", True)):
        wall, cpu = anyio.run(measure, args.iterations, args.events, cold)
        lines.append(table(label, wall, cpu))
    text = "\n".join(lines)
    print(text)
    if args.write:
        cmd = (
            f".venv/bin/python bench/audit_rules.py --iterations {args.iterations} "
            f"--events {args.events} --write"
        )
        Path(__file__).with_name("AUDIT_RESULTS.md").write_text(
            "# Audit rules: latency without the LLM judge\n\n"
            f"Command: `{cmd}`\n\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} while measuring. "
            f"{args.iterations} calls per row after 50 warm-up calls; a tree of "
            f"{args.events + 40} file events (a seeded Python server, `sh -c` -> git + wc), DNS "
            "and a connection; every pre and post rule of the balanced policy; a fresh "
            "CallContext per call. *warm*: the policy's per-path verdict cache holds the paths "
            "(libraries recur across calls); *cold*: cleared before every call. CPU = thread "
            "time (robust to a busy machine), wall = perf_counter.\n\n"
            f"{text}\n\nTarget: pre_audit + post_verify well under 1 ms (1000 µs).\n"
        )


if __name__ == "__main__":
    main()
