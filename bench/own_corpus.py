"""The own attack corpus (issue 15), whole: every case replayed through the guard, observe.

    .venv/bin/python bench/own_corpus.py [--set dev|held-out|all] [--out DIR]

Runs `mtguard eval --suite own` and prints per class and per source the detection rate and
false positives (with the 95% upper bound), then one SUMMARY line. The report
(`DIR/report.md`, `DIR/report.json`) lists the rules behind each catch and every miss.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _common import machine, summary

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 1800  # ~140 cases of 1-3 fresh sandboxes, two at a time: ~15 min loaded


def _cell(r: dict[str, int]) -> str:
    return f"{r['n']}/{r['N']}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "eval-out-own"), help="report folder")
    ap.add_argument("--set", default="dev",
                    choices=("dev", "held-out", "held-out-2", "held-out-3", "all"),
                    help="dev (default), held-out, held-out-2, held-out-3 (written blind to the "
                    "rules) or all")
    opts = ap.parse_args()
    print(f"machine: {machine()}, set {opts.set}", flush=True)
    cmd = [sys.executable, "-m", "mtguard_rt", "eval", "--suite", "own", "--set", opts.set,
           "--out", opts.out]  # fmt: skip
    try:
        done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        print(f"the corpus took over {RUN_TIMEOUT_S} s", file=sys.stderr)
        return 1
    try:
        s = json.loads((Path(opts.out) / "report.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"no report (exit {done.returncode}): {exc}", file=sys.stderr)
        return 1
    print(f"{'class or source':28} {'detected':>9} {'FP':>7}")
    for key in ("classes", "sources"):
        for name, v in s[key].items():
            print(f"{name:28} {_cell(v['detection']):>9} {_cell(v['false_positives']):>7}")
    a = s["all"]
    summary("own_corpus", f"{s['cases']} cases: DR {_cell(a['detection'])} unsafe calls, "
            f"FP {_cell(a['false_positives'])} benign calls (95% upper "
            f"{100 * a['false_positives']['upper95']:.1f}%), {s['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
