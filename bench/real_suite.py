"""The benign real-server suite, whole: every shipped session unguarded and guarded.

    .venv/bin/python bench/real_suite.py [--server NAME ...] [--out DIR]

Runs `mtguard eval --suite real` (default policy, enforce, no per-server policy) and prints
per server the calls, false positives, broken calls, added latency (guarded minus
unguarded wall time of each allowed call, p50/p95) and the guard's own stages (pre-audit,
settle, post-verify from the audit records), then one SUMMARY line. The report
(`DIR/report.md`, `DIR/report.json`) lists every false positive with its rule and evidence.
Latency is wall time on a shared machine: read it beside the load printed first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _common import machine, summary

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 1800  # about 20 sessions, each a sandbox start, BPF compile and ~10 calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", action="append", default=[], help="only this session")
    ap.add_argument("--out", default=str(REPO / "eval-out-real"), help="report folder")
    opts = ap.parse_args()
    print(f"machine: {machine()}", flush=True)
    cmd = [sys.executable, "-m", "mtguard_rt", "eval", "--suite", "real", "--out", opts.out]
    for name in opts.server:
        cmd += ["--server", name]
    try:
        done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        print(f"the suite took over {RUN_TIMEOUT_S} s", file=sys.stderr)
        return 1
    try:
        s = json.loads((Path(opts.out) / "report.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"no report from the suite (exit {done.returncode}): {exc}", file=sys.stderr)
        return 1
    print(f"{'server':22} {'calls':>7} {'FP':>4} {'broken':>6} {'added p50':>9} {'p95':>6} "
          f"{'guard p50':>9} {'p95':>6}  (ms)")
    for v in s["servers"]:
        note = f"  {v['error'][:80]}" if v["error"] else ""
        print(f"{v['server']:22} {v['run']:>3}/{v['calls']:<3} {v['fp']:>4} {v['broken']:>6} "
              f"{v['added_ms_p50']:>9.0f} {v['added_ms_p95']:>6.0f} "
              f"{v['guard_ms_p50']:>9.1f} {v['guard_ms_p95']:>6.1f}{note}")
    rules = ", ".join(f"{r} {n}" for r, n in s["fp_by_rule"].items()) or "none"
    summary("real_suite", f"{len(s['servers'])} servers, {s['run']} calls: {s['fp']} FP "
            f"({rules}), {s['broken']} broken, {len(s['servers_failed'])} sessions failed; "
            f"added p50 {s['added_ms_p50']:.0f} ms, p95 {s['added_ms_p95']:.0f} ms; guard's "
            f"own stages p50 {s['guard_ms_p50']:.1f} ms, p95 {s['guard_ms_p95']:.1f} ms")
    # The benchmark measured; its figures are the result. A failing suite is still a measurement.
    return 0


if __name__ == "__main__":
    sys.exit(main())
