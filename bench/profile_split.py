"""Learned profiles on the evaluation corpus: FPR on held-out benign calls, DR on attacks.

Usage:
    .venv/bin/mtguard eval --no-enforce --out RUN --audit-log RUN/audit.jsonl
    .venv/bin/python -m bench.profile_split --run RUN [--min-calls N] [--json OUT.json]

`RUN/run.json` says which case, pass and label every call had; `RUN/audit.jsonl` holds its
behavior tree (joined by call_id). Cases are split in two halves by a hash of the case id
(deterministic, disjoint); each half's profile is learned from its benign trajectories and
checks the other half's calls (two folds, summed). Learned from: the benign-pass calls the
guard allowed (what `mtguard learn` would use), and, as a second row, every benign-pass call
(the guard's own false positives included). FPR: held-out benign calls (observe passes) the
profile rule flags. DR: held-out unsafe calls (attacked observe passes, attack succeeded)
it flags, with those the shipped rules missed. Matcher cost: per checked call.
The log is streamed twice per fold; nothing is held in memory but the profile.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtguard_rt.audit.profile import CompiledProfile, learn_profiles
from mtguard_rt.eval.replay import CallRun, PassRun
from mtguard_rt.eval.runner import run_decoder
from mtguard_rt.model import AuditRecord
from mtguard_rt.telemetry.auditlog import read_audit_log


def half(case_id: str) -> int:
    """0 or 1: the case's half, from a hash of its id (stable across runs and machines)."""
    return hashlib.sha256(case_id.encode()).digest()[0] & 1


class Labelled:
    __slots__ = ("call", "pass_")

    def __init__(self, pass_: PassRun, call: CallRun) -> None:
        self.pass_, self.call = pass_, call


def index_run(path: Path) -> dict[str, Labelled]:
    run = run_decoder.decode(path.read_bytes())
    out: dict[str, Labelled] = {}
    for p in run.passes:
        if p.mode != "observe":
            continue
        for c in p.calls:
            if c.call_id:
                out[c.call_id] = Labelled(p, c)
    if not out:
        sys.exit(
            f"{path}: no call carries a call_id (record the run with `mtguard eval "
            "--audit-log`, which also stores the join key)"
        )
    return out


def records(log: Path, index: dict[str, Labelled]) -> Iterator[tuple[AuditRecord, Labelled]]:
    for r in read_audit_log(log):
        lab = index.get(r.call_id)
        if lab is not None:
            yield r, lab


def measure(
    log: Path, index: dict[str, Labelled], *, min_calls: int, require_allowed: bool
) -> dict[str, Any]:
    fpr: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # domain -> flagged, profiled, N
    dr: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # + missed by the rules
    dr_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    flagged_examples: list[str] = []
    costs: dict[str, list[float]] = defaultdict(list)
    tools = 0
    for fold in (0, 1):
        learn_from = (
            r
            for r, lab in records(log, index)
            if half(lab.pass_.case_id) == fold and lab.pass_.kind == "benign"
        )
        spec, _ = learn_profiles(learn_from, min_calls=min_calls, require_allowed=require_allowed)
        tools += sum(len(s.tools) for s in spec.servers.values())
        profile = CompiledProfile(spec)
        for r, lab in records(log, index):
            p, c = lab.pass_, lab.call
            if half(p.case_id) == fold or r.tree is None:
                continue
            benign = p.kind == "benign" and c.label == "safe"
            unsafe = p.kind == "attacked" and c.label == "unsafe"
            if not (benign or unsafe):
                continue
            profiled = profile.missing(r.server, r.tool) is None
            t0 = time.perf_counter()
            found = profile.deviations(r.server, r.tool, r.tree, r.arguments)
            if profiled:
                costs[p.domain].append((time.perf_counter() - t0) * 1e6)
            hit = int(bool(found))
            if benign:
                row = fpr[p.domain]
                row[0] += hit
                row[1] += profiled
                row[2] += 1
                if hit and len(flagged_examples) < 12:
                    flagged_examples.append(f"{p.case_id} {r.server}.{r.tool}: {found[0]}")
            else:
                row = dr[f"{p.domain}/{p.surface}"]
                row[0] += hit
                row[1] += profiled
                row[2] += 1
                row[3] += hit and r.decision != "deny"
                t = dr_type[f"{p.domain}/{p.surface}/{p.attack_type}"]
                t[0] += hit
                t[1] += 1
    return {
        "learned_from": "allowed benign calls" if require_allowed else "all benign calls",
        "min_calls": min_calls,
        "profiles": tools,
        "fpr": {
            d: {"flagged": a, "profiled": b, "N": n, "rate": round(a / n, 4) if n else None}
            for d, (a, b, n) in sorted(fpr.items())
        },
        "dr": {
            d: {
                "flagged": a,
                "profiled": b,
                "N": n,
                "rate": round(a / n, 4) if n else None,
                "missed_by_rules_but_flagged": m,
            }
            for d, (a, b, n, m) in sorted(dr.items())
        },
        "dr_by_attack_type": {k: {"flagged": a, "N": n} for k, (a, n) in sorted(dr_type.items())},
        "matcher_us": {
            d: {
                "n": len(v),
                "p50": round(statistics.median(v), 1),
                "p95": round(sorted(v)[int(0.95 * (len(v) - 1))], 1),
                "max": round(max(v), 1),
            }
            for d, v in sorted(costs.items())
            if v
        },
        "flagged_benign_examples": flagged_examples,
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"## learned from {result['learned_from']} (min {result['min_calls']} calls; "
        f"{result['profiles']} tool profiles over both folds)",
        "",
        "| domain | benign calls | with a profile | flagged | FPR |",
        "|---|---|---|---|---|",
    ]
    for d, v in result["fpr"].items():
        rate = "n/a" if v["rate"] is None else f"{v['rate']:.1%}"
        lines.append(f"| {d} | {v['N']} | {v['profiled']} | {v['flagged']} | {rate} |")
    lines += [
        "",
        "| domain/surface | unsafe calls | with a profile | flagged | DR | "
        "flagged, not denied by the rules |",
        "|---|---|---|---|---|---|",
    ]
    for d, v in result["dr"].items():
        rate = "n/a" if v["rate"] is None else f"{v['rate']:.1%}"
        lines.append(
            f"| {d} | {v['N']} | {v['profiled']} | {v['flagged']} | {rate} | "
            f"{v['missed_by_rules_but_flagged']} |"
        )
    lines += ["", "| attack type | flagged / unsafe calls |", "|---|---|"]
    for k, v in result["dr_by_attack_type"].items():
        lines.append(f"| {k} | {v['flagged']}/{v['N']} |")
    lines += [
        "",
        "matcher cost per checked call (µs): "
        + "; ".join(
            f"{d} p50 {v['p50']} p95 {v['p95']} max {v['max']} (n={v['n']})"
            for d, v in result["matcher_us"].items()
        ),
    ]
    if result["flagged_benign_examples"]:
        lines += ["", "flagged benign calls (first evidence):"]
        lines += [f"- {e}" for e in result["flagged_benign_examples"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--run",
        required=True,
        metavar="DIR",
        help="an eval output folder with run.json and audit.jsonl",
    )
    ap.add_argument("--audit-log", metavar="PATH", help="default: RUN/audit.jsonl")
    ap.add_argument("--min-calls", type=int, default=3, metavar="N")
    ap.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    args = ap.parse_args()
    run_dir = Path(args.run)
    log = Path(args.audit_log) if args.audit_log else run_dir / "audit.jsonl"
    for need in (run_dir / "run.json", log):
        if not need.is_file():
            sys.exit(f"missing {need}: record a run with `mtguard eval --audit-log`")
    index = index_run(run_dir / "run.json")
    results = [
        measure(log, index, min_calls=args.min_calls, require_allowed=ra) for ra in (True, False)
    ]
    text = "".join(render(r) + "\n" for r in results)
    print(f"# profile split on {run_dir} (halves by sha256(case_id)[0] & 1)\n")
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
