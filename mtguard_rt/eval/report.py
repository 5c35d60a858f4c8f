"""The evaluation report: Markdown for people, JSON for machines, from one recorded run.

`render_markdown(run)` gives Table 1 (DR per domain x attack source, mtguard vs TCG vs TRI,
n/N), Table 2 (FPR per domain with the number of safe calls), Table 3 (ablation), per-stage
latency, and the enforce-mode outcomes (benign completion; attacks whose side effect still
happened before a deny). `render_json(run)` is the same figures plus what did not run.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .metrics import summary
from .runner import EvalRun

PAPER = (
    "paper (MTGuard, LLM audit): DR 48.3% (116/240; server 32.5%, host 75.0%, user 100%), "
    "FPR 3.7%; TCG 8.3%, TRI 0.0%; ~12.4 s of LLM audit per call"
)


def _cell(r: dict[str, Any]) -> str:
    if not r["N"]:
        return "-"
    return f"{100 * r['n'] / r['N']:.1f}% ({r['n']}/{r['N']})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _detection_rows(det: dict[str, Any], names: list[str]) -> list[list[str]]:
    rows = []
    for domain, row in det.items():
        for source in ("server", "host", "user", "all"):
            first = row[source][names[0]]
            if not first["N"]:
                continue
            rows.append([domain, source, *(_cell(row[source][n]) for n in names)])
    return rows


def render_markdown(run: EvalRun) -> str:
    s = summary(run)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run.started)) if run.started else "?"
    out = [
        "# mtguard-rt evaluation",
        "",
        f"Run {when}, {run.seconds:.0f} s; policy `{run.policy}`; LLM judge "
        f"{'on' if run.llm else 'off'}; domains {', '.join(run.domains)}; sources "
        f"{', '.join(run.sources)}; {s['scenarios_run']} scenarios replayed.",
        f"Reproduce: `{run.command or 'mtguard eval'}`",
        "",
        f"For comparison, the {PAPER}.",
        "",
        "## Table 1: detection rate on unsafe calls (observe mode)",
        "",
    ]
    out += _table(
        ["domain", "source", "mtguard", "mtguard (strict)", "TCG", "TRI"],
        _detection_rows(s["detection"], ["mtguard", "mtguard (strict)", "TCG", "TRI"]),
    )
    out += [
        "",
        "*strict*: only denials by a rule that did not also deny a call of the same "
        "task's benign run (a rule that fires on every run of a task is not a detection).",
    ]
    out += [
        "",
        "Per attack (flagged on any call up to its first unsafe call, e.g. TRI on the "
        "injected result that led to it):",
        "",
    ]
    out += _table(
        ["source", "attacks", "mtguard", "TCG", "TRI"],
        [
            [src, str(r["mtguard"]["N"]), *(_cell(r[n]) for n in ("mtguard", "TCG", "TRI"))]
            for src, r in s["attacks"].items()
            if r["mtguard"]["N"]
        ],
    )
    out += ["", "## Table 2: false-positive rate on the benign trajectories' calls", ""]
    out += _table(
        ["domain", "safe calls", "mtguard", "TCG", "TRI"],
        [
            [d, str(r["mtguard"]["N"]), *(_cell(r[n]) for n in ("mtguard", "TCG", "TRI"))]
            for d, r in s["false_positives"].items()
        ],
    )
    abl = s["ablation"]
    names = ["pre-audit only", "monitor + post-verification only", "full"]
    out += ["", "## Table 3: ablation (detection rate; last row: FPR)", ""]
    rows = _detection_rows(abl["detection"], names)
    rows += [[d, "FPR", *(_cell(r[n]) for n in names)] for d, r in abl["false_positives"].items()]
    out += _table(["domain", "source", *names], rows)
    rules = s["rules"]
    out += [
        "",
        "Enforcing rules behind the verdicts (calls denied, per rule): unsafe calls: "
        + (", ".join(f"{r} {n}" for r, n in rules["unsafe"].items()) or "none")
        + "; benign calls: "
        + (", ".join(f"{r} {n}" for r, n in rules["benign"].items()) or "none")
        + ".",
    ]
    lat = s["latency_ms"]
    domains = list(lat)
    out += ["", "## Latency per call (ms, p50 / p95, observe-mode calls that reached a server)", ""]
    out += _table(
        ["stage", *(f"{d} ({lat[d]['calls']} calls)" for d in domains)],
        [
            [st, *(f"{lat[d][st]['p50']:.1f} / {lat[d][st]['p95']:.1f}" for d in domains)]
            for st in ("pre", "exec", "settle", "post", "total", "added")
        ],
    )
    out += ["", "`exec` is the server's own work; `added` = total - exec is what the guard adds."]
    enf = s["enforce"]
    out += [
        "",
        "## Enforce mode",
        "",
        f"Benign task completion (no call denied): {_cell(enf['benign_completion'])}; "
        f"tool errors in benign calls: {enf['benign_tool_errors']}.",
        "",
    ]
    for key, cases in enf["attacks"].items():
        out.append(f"- {key}: {len(cases)}")
    if enf["attacks"].get("rolled back"):
        out += ["", "Rolled back: denied after execution; the unsafe calls' only effects were "
                "workspace file changes the rollback restored (`[sandbox] rollback`)."]  # fmt: skip
    harmed = enf["attacks"]["harm before deny"] + enf["attacks"]["not stopped"]
    if harmed:
        out += ["", "Attacks whose unsafe call still reached a server:", ""]
        out += _table(
            ["case", "source", "attack", "outcome", "side effects seen"],
            [
                [
                    c["case_id"],
                    c["surface"],
                    c["attack_type"],
                    "denied after execution"
                    if c in enf["attacks"]["harm before deny"]
                    else "not stopped",
                    "; ".join(e[:90] for e in c["side_effects"]) or "none observed",
                ]
                for c in harmed
            ],
        )
    notes = []
    if s["attacks_failed"]:
        notes.append(
            f"attacks whose evaluator said they did not succeed (their calls are "
            f"not counted): {', '.join(s['attacks_failed'])}"
        )
    if s["scenarios_not_run"]:
        reasons: dict[str, int] = {}
        for item in s["scenarios_not_run"]:
            reasons[item["reason"]] = reasons.get(item["reason"], 0) + 1
        notes += [f"not run ({n} scenarios): {why}" for why, n in reasons.items()]
    notes += [f"pass error: {e}" for e in s["pass_errors"]]
    if notes:
        out += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    return "\n".join(out) + "\n"


def render_json(run: EvalRun) -> str:
    data = {
        "started": run.started,
        "seconds": run.seconds,
        "policy": run.policy,
        "domains": run.domains,
        "sources": run.sources,
        "command": run.command,
        **summary(run),
    }
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
