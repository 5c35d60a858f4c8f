"""The guard's per-call CPU, stage by stage, on real calls of a real server (issue 13).

    .venv/bin/python bench/hot_path.py [--calls 60] [--rounds 20] [--digest FILE]
    PYTHONPATH=DIR .venv/bin/python bench/hot_path.py ...   # another tree's code, same calls

The library guard (`open_guard`, balanced policy, online enforce, default config) runs
`mcp-server-git` (PyPI, from .servers/py) in its sandbox on `--calls` calls (git_status,
git_log, git_diff_unstaged over small repositories, as bench/real_latency.py), recording each
call's inputs to the hot-path stages as the supervisor handed them over. Then, with the
server idle, each recorded input is replayed `--rounds` times through that stage alone and
timed in CPU time (`time.process_time`, this process only: another helper's load slows the
wall clock, not these counts):
- consent: `OnlineRules(policy, ctx).kernel_consent(kernel writes)` (at window open: before
  the call is forwarded);
- pre: `engine.pre_rules(ctx)`; post: `engine.post_rules(ctx, tree, result)`;
- seed: `procfs.snapshot(cgroup)` of the sandbox (every window's seeding);
- record: encoding the audit record (`AuditLog.write_sync`, to /dev/null).
Each replay gets a fresh copy of the context (`copy.deepcopy`, outside the timing): caches a
first run fills (cached properties) are not carried over. `--digest FILE` writes every
replayed verdict (decision, rules, reasons) and consent list: two trees' digests on the same
calls are equal when an optimisation kept every verdict (`cmp`): record once with `--save
FILE`, replay with `--load FILE` under each tree (live trees differ run to run: a loaded
machine leaves one incomplete). `--profile tottime` adds a cProfile of the replays.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _common import ROOT, machine, pct, summary

from mtguard_rt import GuardConfig, open_guard
from mtguard_rt.audit.loader import load_policy
from mtguard_rt.audit.online import OnlineRules
from mtguard_rt.monitor import procfs
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.telemetry import AuditLog

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_latency import GIT_SERVER, PY_SERVERS, TOOLS, arguments, make_repos

TASK = "review the state of my repositories"
WARMUP = 6  # first calls: imports, GitPython's helpers start, page cache


def _ms(xs: list[float]) -> str:
    return f"p50 {pct(xs, .5):7.3f} p95 {pct(xs, .95):7.3f} ms"


def _verdict(v: Any) -> list[Any]:
    return [v.decision, v.phase, sorted(x.rule for x in v.violations),
            sorted(x.reason for x in v.violations)]


async def record_calls(n: int, ws: Path, repos: list[Path], tmp: str) -> dict[str, Any]:
    """Run the calls through the library guard; capture each stage's inputs."""
    config = GuardConfig(audit_log=f"{tmp}/audit.jsonl", telemetry={"exporter": "off"},
                         sandbox=SandboxConfig(workspace=str(ws), mounts=[str(PY_SERVERS)]),
                         task=TASK)
    got: dict[str, Any] = {"pre": [], "post": [], "records": []}
    async with open_guard(config) as guard:
        engine = guard.engine
        pre_rules, post_rules = engine.pre_rules, engine.post_rules

        def pre(ctx: Any) -> Any:
            if ctx.call.tool in TOOLS:  # the calls (not the start-up, between-call records)
                got["pre"].append(copy.deepcopy(ctx))
            return pre_rules(ctx)

        def post(ctx: Any, tree: Any, result: Any) -> Any:
            if ctx.call.tool in TOOLS:
                got["post"].append((copy.deepcopy(ctx), copy.deepcopy(tree),
                                    copy.deepcopy(result)))
            return post_rules(ctx, tree, result)

        engine.pre_rules, engine.post_rules = pre, post  # type: ignore[method-assign]
        async with guard.connect([str(GIT_SERVER)], name="git") as server:
            sup = server.supervisor
            for i in range(n + WARMUP):
                tool = TOOLS[i % len(TOOLS)]
                await server.call_tool(tool, arguments(tool, repos[(i // len(TOOLS)) % len(repos)]))
            got["kernel_writes"] = list(sup.kernel_writes)
            got["policy"] = engine.policy
            watch = sup.watch
            got["cgroup"] = getattr(watch, "cgroup_path", None)
            times = []
            for _ in range(20):
                t = time.process_time()
                procfs.snapshot(got["cgroup"])
                times.append((time.process_time() - t) * 1000)
            got["seed"] = times
            got["procs"] = len(procfs.cgroup_pids(got["cgroup"]))
        got["records"] = list(guard.records)
    for key in ("pre", "post"):
        got[key] = got[key][WARMUP:]
    got["records"] = [r for r in got["records"] if r.tool in TOOLS][WARMUP:]
    return got


class _Timer:
    """CPU time of the stage calls alone; with `prof`, they alone are profiled too."""

    def __init__(self, prof: Any = None) -> None:
        self.prof = prof
        self.t = 0.0

    def __enter__(self) -> _Timer:
        if self.prof is not None:
            self.prof.enable()
        self.t = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.t = (time.process_time() - self.t) * 1000
        if self.prof is not None:
            self.prof.disable()


def replay(got: dict[str, Any], rounds: int, prof: Any = None,
           ) -> tuple[dict[str, list[float]], list[Any]]:
    from mtguard_rt.audit import PolicyEngine

    policy = got["policy"]
    engine = PolicyEngine(policy)
    out: dict[str, list[float]] = {"consent": [], "pre": [], "post": [], "record": []}
    digest: list[Any] = []
    for ctx in got["pre"]:
        for r in range(rounds):
            a, b = copy.deepcopy(ctx), copy.deepcopy(ctx)
            with _Timer(prof) as t1:
                lifted = OnlineRules(policy, a).kernel_consent(got["kernel_writes"])
            with _Timer(prof) as t2:
                verdict = engine.pre_rules(b)
            out["consent"].append(t1.t)
            out["pre"].append(t2.t)
            if r == 0:
                digest.append(["consent", lifted, "pre", _verdict(verdict)])
    for ctx, tree, result in got["post"]:
        for r in range(rounds):
            c = copy.deepcopy(ctx)
            with _Timer(prof) as t1:
                verdict = engine.post_rules(c, tree, result)
            out["post"].append(t1.t)
            if r == 0:
                digest.append(["post", _verdict(verdict)])
    with AuditLog(os.devnull) as log:
        for record in got["records"]:
            for _ in range(rounds):
                with _Timer(prof) as t1:
                    log.write_sync(record)
                out["record"].append(t1.t)
    return out, digest


async def main(calls: int, rounds: int, digest_file: str | None, profile: str | None,
               save: str | None, load: str | None) -> None:
    print(f"# hot_path: {machine()}; code from {Path(__import__('mtguard_rt').__file__).parent}")
    if not GIT_SERVER.is_file():
        raise SystemExit(f"{GIT_SERVER} missing: run `make setup` (installs the real servers)")
    with tempfile.TemporaryDirectory(prefix="mtguard-hot-") as tmp:
        ws = Path(tmp) / "ws"
        repos = make_repos(ws, 8)
        if load:  # another run's recorded calls: both trees' code judges the same inputs
            got = pickle.loads(await anyio.Path(load).read_bytes())
            got["policy"] = load_policy(None)
        else:
            got = await record_calls(calls, ws, repos, tmp)
        if save:
            kept = {k: v for k, v in got.items() if k != "policy"}
            await anyio.Path(save).write_bytes(pickle.dumps(kept))
    denied = [r.tool for r in got["records"] if r.decision == "deny"]
    if profile:  # where the replay's CPU goes (cProfile: slower, so no figures then)
        import cProfile
        import pstats

        prof = cProfile.Profile()
        replay(got, rounds, prof)
        pstats.Stats(prof).sort_stats(profile).print_stats(40)
    out, digest = replay(got, rounds)
    out["seed"] = got["seed"]  # measured live by the recording run (`--load`: that run's)
    print(f"{len(got['post'])} calls replayed x{rounds}; {len(denied)} denied; "
          f"{got['procs']} processes in the sandbox at the end")
    for stage in ("consent", "pre", "post", "seed", "record"):
        print(f"cpu {stage:8} {_ms(out[stage])}")
    total = sum(pct(out[s], .5) for s in out)
    stages = {r.tool: [] for r in got["records"]}
    for r in got["records"]:
        stages[r.tool].append(r.timings_ms.total)
    print("the recorded calls' supervisor total (wall, under whatever load): " + ", ".join(
        f"{t} {_ms(xs)}" for t, xs in stages.items()))
    if digest_file:
        await anyio.Path(digest_file).write_text(json.dumps(digest, indent=0) + "\n")
        print(f"verdict digest: {digest_file} ({len(digest)} entries)")
    summary("hot_path", f"CPU per call, sum of the stages' p50: {total:.2f} ms ("
            + ", ".join(f"{s} {pct(out[s], .5):.2f}" for s in out) + f"); {len(denied)} denied")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--digest", help="write the replayed verdicts here (compare two trees)")
    parser.add_argument("--profile", choices=("tottime", "cumtime"),
                        help="also print a cProfile of the replays, sorted so")
    parser.add_argument("--save", help="pickle the recorded calls here")
    parser.add_argument("--load", help="replay the calls another run saved (no server)")
    args = parser.parse_args()
    os.chdir(ROOT)
    anyio.run(main, args.calls, args.rounds, args.digest, args.profile, args.save, args.load,
              backend="trio")
