"""Added latency per allowed call on a real server: `mcp-server-git` (PyPI, from .servers/py)
through `mtguard proxy` vs the same server run directly (both driven by the real MCP SDK
client), and vs the same server in the same sandbox without the guard (raw JSON-RPC over the
container's stdio: the sandbox's own cost apart), and vs a second proxy with `[monitor]
workers = false` (the settle of before issue 13: wait for spawned processes up to the bound),
calls interleaved one for one in the same run (so load hits all four alike).

    .venv/bin/python bench/real_latency.py [--calls 150] [--repos 8] [--base-tree DIR]

`--base-tree DIR` (a source tree of another commit, e.g. `git archive C | tar -x -C DIR`)
replaces the fourth series with the same proxy run from DIR's code (`python -m mtguard_rt`,
`PYTHONPATH=DIR`): a before/after of the guard's hot path in one run, calls alternating.

Calls rotate git_status / git_log / git_diff_unstaged over `--repos` small repositories, so
no identical call repeats within the repeated-call window. GitPython starts long-lived
`git cat-file` helpers: before workers (issue 13) each such call waited out the 1,000 ms
settle bound. Reported per tool and overall: wall time p50/p95 direct and guarded, the added
p50/p95 (guarded minus direct at the same percentile), the ratio, and the proxy's own stages
from its audit log (settle: response to verdict-ready). Targets: added p50 <= 3 ms, p95 <= 10.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
from _common import ROOT, machine, ms, own_containers, pct, sandbox_client, summary

from mtguard_rt.eval.mcp_client import open_stdio_client
from mtguard_rt.sandbox import SandboxConfig, open_sandbox

PY_SERVERS = (ROOT / ".servers" / "py").resolve()  # a linked .servers: one mount
GIT_SERVER = PY_SERVERS / "bin" / "mcp-server-git"
TOOLS = ("git_status", "git_log", "git_diff_unstaged")
SANDBOX_UID = 1000  # the example workspaces' owner (tests/e2e/test_real_servers.py)
WARMUP = 12  # first calls: imports, helper start-up, page cache
TARGET_P50_MS, TARGET_P95_MS = 3.0, 10.0


def make_repos(ws: Path, n: int) -> list[Path]:
    repos = []
    for i in range(n):
        repo = ws / f"project-{i}"
        repo.mkdir(parents=True)
        for args in (["init", "-q", "-b", "main"], ["config", "user.email", "dev@example.org"],
                     ["config", "user.name", "Dev"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        for j in range(3):
            (repo / f"file{j}.txt").write_text(f"line {j}\n")
            subprocess.run(["git", "add", "."], cwd=repo, check=True)
            subprocess.run(["git", "commit", "-qm", f"change {j}"], cwd=repo, check=True)
        (repo / "file0.txt").write_text("line 0\nedited\n")  # something for diff and status
        repos.append(repo)
    for root, dirs, files in os.walk(ws):
        for name in [root, *(os.path.join(root, x) for x in [*dirs, *files])]:
            os.lchown(name, SANDBOX_UID, SANDBOX_UID)
    return repos


def arguments(tool: str, repo: Path) -> dict[str, Any]:
    return {"repo_path": str(repo), "max_count": 5} if tool == "git_log" else {
        "repo_path": str(repo)}


def row(name: str, base: str, direct: list[float], guarded: list[float]) -> dict[str, float]:
    d50, d95, g50, g95 = pct(direct, .5), pct(direct, .95), pct(guarded, .5), pct(guarded, .95)
    print(f"{name:18} n={len(guarded):4}  {base} p50 {d50:7.2f} p95 {d95:7.2f}  guarded p50 "
          f"{g50:7.2f} p95 {g95:7.2f}  added p50 {g50 - d50:+7.2f} p95 {g95 - d95:+7.2f} ms  "
          f"ratio p50 {g50 / d50:.2f}x")
    return {"added_p50": g50 - d50, "added_p95": g95 - d95}


@contextmanager
def _stderr_on_failure(errlog: Any) -> Iterator[None]:
    """A run that fails shows the servers' and proxies' stderr (why one did not start)."""
    try:
        yield
    except BaseException:
        errlog.seek(0)
        print(errlog.read()[-4000:], file=sys.stderr)
        raise


def _outside(walls: list[float], records: list[dict[str, Any]]) -> list[float]:
    """Wall time minus the supervisor's total, per allowed call after warm-up (the call
    records, in order, pair with the calls; start-up and between-call records are apart)."""
    calls = [r for r in records if r.get("tool") in TOOLS]
    return [w - float(r["timings_ms"]["total"]) for i, (w, r) in
            enumerate(zip(walls, calls, strict=False)) if i >= WARMUP and r["decision"] == "allow"]


def _cpu_ms(config: Path) -> float:
    """User + system CPU time (ms) of the proxy started with `config` (bench only: it is
    alive while the clients are connected)."""
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if str(config).encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return (int(fields[11]) + int(fields[12])) * 1000.0 / tick
    return float("nan")


def _stages(name: str, records: list[dict[str, Any]]) -> None:
    kept = [r for r in [x for x in records if x.get("tool") in TOOLS][WARMUP:]
            if r.get("decision") == "allow"]  # call records (not start-up, between)
    for stage in ("pre", "exec", "settle", "post", "total"):
        xs = [float(r["timings_ms"][stage]) for r in kept]
        print(f"{name} stage {stage:7} p50 {pct(xs, .5):8.3f} p95 {pct(xs, .95):8.3f} ms")


async def main(calls: int, n_repos: int, base_tree: str | None) -> None:
    print(f"# real_latency: {machine()}")
    if not GIT_SERVER.is_file():
        raise SystemExit(f"{GIT_SERVER} missing: run `make setup` (installs the real servers)")
    mtguard = str(ROOT / ".venv" / "bin" / "mtguard")
    with tempfile.TemporaryDirectory(prefix="mtguard-bench-") as tmp, \
            tempfile.TemporaryFile("w+") as errlog, _stderr_on_failure(errlog):
        ws = Path(tmp) / "ws"
        repos = make_repos(ws, n_repos)
        def proxy_cmd(name: str, extra: str, guard: list[str] | None = None) -> list[str]:
            conf = Path(tmp) / f"{name}.toml"
            conf.write_text(f'audit_log = "{tmp}/{name}.jsonl"\n[telemetry]\nexporter = "off"\n'
                            + extra)
            return [*(guard or [mtguard]), "proxy", "--config", str(conf), "--name", name,
                    "--workspace", str(ws), "--mount", str(PY_SERVERS),
                    "--task", "review the state of my repositories", "--", str(GIT_SERVER)]

        audit = Path(tmp) / "git.jsonl"
        guarded_cmd = proxy_cmd("git", "")
        base_env = None
        if base_tree:  # the same proxy, another commit's code
            before_cmd = proxy_cmd("before", "", [sys.executable, "-m", "mtguard_rt"])
            base_env = {**os.environ, "PYTHONPATH": base_tree}
        else:
            before_cmd = proxy_cmd("before", "[monitor]\nworkers = false\n")
        # the direct server runs as root on uid 1000's repositories: trust them, as the
        # sandbox's user (their owner) does without asking
        env = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
               "GIT_CONFIG_VALUE_0": "*"}
        direct: dict[str, list[float]] = {t: [] for t in TOOLS}
        boxed: dict[str, list[float]] = {t: [] for t in TOOLS}
        before: dict[str, list[float]] = {t: [] for t in TOOLS}
        guarded: dict[str, list[float]] = {t: [] for t in TOOLS}
        denied: list[str] = []
        walls: dict[str, list[float]] = {"git": [], "before": []}  # every call, in order
        cpu0: dict[str, float] = {}
        t0 = time.perf_counter()
        async with open_stdio_client(guarded_cmd, errlog=errlog, mode="legacy",
                                     request_timeout=120) as gx, \
                open_stdio_client([str(GIT_SERVER)], env=env, errlog=errlog, mode="legacy") as dx, \
                AsyncExitStack() as stack:
            bx = await stack.enter_async_context(open_stdio_client(
                before_cmd, env=base_env, errlog=errlog, mode="legacy", request_timeout=120))
            box = SandboxConfig(workspace=str(ws), mounts=[str(PY_SERVERS)])
            sb = await stack.enter_async_context(
                open_sandbox([str(GIT_SERVER)], box, name="bench-raw-git"))
            raw = sandbox_client(sb)
            await raw.initialize()
            print(f"connected all four in {ms(t0, time.perf_counter()):.0f} ms")
            for i in range(calls + WARMUP):
                if i == WARMUP:
                    cpu0 = {name: _cpu_ms(Path(tmp) / f"{name}.toml") for name in walls}
                tool = TOOLS[i % len(TOOLS)]
                args = arguments(tool, repos[(i // len(TOOLS)) % len(repos)])
                t1 = time.perf_counter()
                await raw.call(tool, args)
                if i >= WARMUP:
                    boxed[tool].append(ms(t1, time.perf_counter()))
                for client, out in ((dx, direct), (gx, guarded), (bx, before)):
                    t1 = time.perf_counter()
                    result = await client.call_tool(tool, args)
                    wall = ms(t1, time.perf_counter())
                    if client is not dx:
                        walls["git" if client is gx else "before"].append(wall)
                    text = json.dumps(result)[:200]
                    if result.get("isError"):
                        label = "guarded" if client is gx else "base/before"
                        (denied if client is not dx else []).append(f"{label} {tool}: {text}")
                        if client is dx:
                            raise SystemExit(f"the direct server failed {tool}: {text}")
                    elif i >= WARMUP:
                        out[tool].append(wall)
            cpu = {name: (_cpu_ms(Path(tmp) / f"{name}.toml") - cpu0[name]) / calls
                   for name in walls}
        records = [json.loads(x) for x in audit.read_text().splitlines() if x.strip()]
        old = [json.loads(x) for x in (Path(tmp) / "before.jsonl").read_text().splitlines()
               if x.strip()]
    print(f"guarded calls denied or failed: {len(denied)} of {calls + WARMUP}")
    for line in denied[:5]:
        print(f"  {line}")
    every_d = [x for t in TOOLS for x in direct[t]]
    every_g = [x for t in TOOLS for x in guarded[t]]
    every_b = [x for t in TOOLS for x in boxed[t]]
    for tool in TOOLS:
        row(tool, "direct", direct[tool], guarded[tool])
    total = row("all", "direct", every_d, every_g)
    print("the guard apart from the sandbox (guarded vs the same sandbox, raw JSON-RPC):")
    for tool in TOOLS:
        row(tool, "sandbx", boxed[tool], guarded[tool])
    guard_only = row("all", "sandbx", every_b, every_g)
    if base_tree:
        print(f"this tree vs the base tree {base_tree} (same proxy, same calls, alternating):")
        for tool in TOOLS:
            row(tool, "base  ", before[tool], guarded[tool])
        row("all", "base  ", [x for t in TOOLS for x in before[t]], every_g)
        _stages("base ", old)
        outside_b = _outside(walls["before"], old)
        print(f"base  outside the supervisor p50 {pct(outside_b, .5):.3f} ms "
              f"p95 {pct(outside_b, .95):.3f} ms")
        print(f"proxy CPU per call (user + system, after warm-up): this tree {cpu['git']:.2f} "
              f"ms, base {cpu['before']:.2f} ms ({cpu['git'] / cpu['before']:.2f}x)")
    print("before workers (`[monitor] workers = false`: settle waits for spawned processes):"
          if not base_tree else "base tree vs direct:")
    every_o = [x for t in TOOLS for x in before[t]]
    for tool in TOOLS:
        row(tool, "direct", direct[tool], before[tool])
    was = row("all", "direct", every_d, every_o)
    olds = [float(r["timings_ms"]["settle"]) for r in old[WARMUP:]
            if r.get("decision") == "allow" and r.get("tool") in TOOLS]
    print(f"before: proxy stage settle p50 {pct(olds, .5):8.3f} p95 {pct(olds, .95):8.3f} ms")
    kept = [r for r in [x for x in records if x.get("tool") in TOOLS][WARMUP:]
            if r.get("decision") == "allow"]  # call records (not start-up, between)
    for stage in ("pre", "exec", "settle", "post", "total"):
        xs = [float(r["timings_ms"][stage]) for r in kept]
        print(f"proxy stage {stage:7} p50 {pct(xs, .5):8.3f} p95 {pct(xs, .95):8.3f} ms")
    outside = _outside(walls["git"], records)
    print(f"outside the supervisor (SDK hops, relay, audit log) p50 {pct(outside, .5):.3f} ms "
          f"p95 {pct(outside, .95):.3f} ms")
    rolled = {str((r.get("rollback") or {}).get("mode")) for r in kept}
    events = [sum(len(p.get("files") or []) for p in (r.get("tree") or {}).get("processes") or [])
              for r in kept]
    print(f"rollback modes: {sorted(rolled)}; file events per tree p50 {pct(events, .5):.0f}")
    workers = sum(1 for r in kept if (r.get("tree") or {}).get("workers"))
    print(f"allowed calls that left a worker running: {workers} of {len(kept)}")
    print(f"containers left: {len(own_containers())}")
    ok = total["added_p50"] <= TARGET_P50_MS and total["added_p95"] <= TARGET_P95_MS
    summary("real_latency",
            f"mcp-server-git via proxy: added p50 {total['added_p50']:+.2f} ms, p95 "
            f"{total['added_p95']:+.2f} ms (targets {TARGET_P50_MS:g}/{TARGET_P95_MS:g}: "
            f"{'met' if ok else 'MISSED'}); vs the same sandbox unguarded p50 "
            f"{guard_only['added_p50']:+.2f} ms, p95 {guard_only['added_p95']:+.2f} ms; "
            f"{'base tree' if base_tree else 'before workers'}: added p50 "
            f"{was['added_p50']:+.2f} ms, p95 {was['added_p95']:+.2f} ms; "
            f"{len(denied)} denied; {workers} calls left workers")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--repos", type=int, default=8)
    parser.add_argument("--base-tree", help="a source tree to run the fourth proxy from")
    args = parser.parse_args()
    base = os.path.abspath(args.base_tree) if args.base_tree else None
    anyio.run(main, args.calls, args.repos, base, backend="trio")
