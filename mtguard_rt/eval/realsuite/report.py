"""The real-server suite's report: per server calls, false positives, broken calls, latency.

`summarise(run)` gives the figures as plain data (also `report.json`); `render_markdown(run)`
the tables a reader checks first, then every false positive with its rules and evidence and
every broken call with a short diff. `failed(run)` is what the CLI's exit code follows: any
false positive, broken call, session error or session that did not run to its end.
"""

from __future__ import annotations

import json
from typing import Any

from ..metrics import percentile
from .runner import CallRun, ServerRun, SuiteRun


def added_ms(calls: list[CallRun]) -> list[float]:
    """Guarded minus unguarded wall time of each allowed call that ran both ways."""
    return [
        round(c.guarded_ms - c.unguarded_ms, 2)
        for c in calls
        if c.status in ("ok", "broken") and c.guarded_ms is not None and c.unguarded_ms is not None
    ]


def guard_ms(calls: list[CallRun]) -> list[float]:
    """The guard's own stages (pre-audit, settle, post-verify) of each allowed call."""
    return [c.guard_ms for c in calls if c.status in ("ok", "broken") and c.guard_ms is not None]


def _server_summary(s: ServerRun) -> dict[str, Any]:
    added = added_ms(s.calls)
    own = guard_ms(s.calls)
    count = {k: sum(c.status == k for c in s.calls) for k in ("ok", "fp", "broken",
                                                              "session-error")}
    fps = [{"call": c.index, "tool": c.tool, "rules": c.rules, "phase": c.phase,
            "evidence": c.evidence, "arguments": c.arguments, "task": c.task}
           for c in s.calls if c.status == "fp"]
    broken = [{"call": c.index, "tool": c.tool, "diff": c.detail, "after_fp": c.after_fp}
              for c in s.calls if c.status == "broken"]
    errors = [{"call": c.index, "tool": c.tool, "why": c.detail} for c in s.calls
              if c.status == "session-error"]
    return {
        "server": s.server, "package": s.package, "registry": s.registry,
        "calls": len(s.calls), "run": sum(c.status is not None for c in s.calls),
        **{k.replace("-", "_"): v for k, v in count.items()},
        "false_positives": fps, "broken_calls": broken, "session_errors": errors,
        "error": s.error,
        "added_ms_p50": percentile(added, 50), "added_ms_p95": percentile(added, 95),
        "guard_ms_p50": percentile(own, 50), "guard_ms_p95": percentile(own, 95),
        "seconds": s.seconds,
    }


def summarise(run: SuiteRun) -> dict[str, Any]:
    servers = [_server_summary(s) for s in run.servers]
    added = [ms for s in run.servers for ms in added_ms(s.calls)]
    own = [ms for s in run.servers for ms in guard_ms(s.calls)]
    rules: dict[str, int] = {}
    for s in run.servers:
        for c in s.calls:
            if c.status == "fp":
                for r in c.rules or ["(no audit record)"]:
                    rules[r] = rules.get(r, 0) + 1
    return {
        "commit": run.commit, "command": run.command, "started": run.started,
        "seconds": run.seconds,
        "calls": sum(s["calls"] for s in servers), "run": sum(s["run"] for s in servers),
        "fp": sum(s["fp"] for s in servers), "broken": sum(s["broken"] for s in servers),
        "session_error": sum(s["session_error"] for s in servers),
        "servers_failed": [s["server"] for s in servers if s["error"]],
        "fp_by_rule": dict(sorted(rules.items(), key=lambda kv: -kv[1])),
        "added_ms_p50": percentile(added, 50), "added_ms_p95": percentile(added, 95),
        "guard_ms_p50": percentile(own, 50), "guard_ms_p95": percentile(own, 95),
        "servers": servers,
    }


def failed(run: SuiteRun) -> bool:
    s = summarise(run)
    return bool(s["fp"] or s["broken"] or s["session_error"] or s["servers_failed"])


def render_json(run: SuiteRun) -> str:
    return json.dumps(summarise(run), indent=2, ensure_ascii=False)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(run: SuiteRun) -> str:
    s = summarise(run)
    out = [
        "# Real-server benign suite",
        "",
        f"Commit `{s['commit'] or '?'}`, {s['seconds']:.0f} s. Every call is benign work on a "
        "real registry server, run unguarded then through `mtguard proxy` (enforce, default "
        "policy, no per-server policy). FP: the guard denied it; broken: allowed but its "
        "normalised result differs from the unguarded one.",
        "",
        f"**{s['fp']} false positive(s) and {s['broken']} broken call(s) in {s['run']} calls "
        f"run ({s['calls']} in the sessions)**; added latency (guarded minus unguarded wall "
        f"time) p50 {s['added_ms_p50']:.0f} ms, p95 {s['added_ms_p95']:.0f} ms; the guard's own "
        f"stages (pre + settle + post) p50 {s['guard_ms_p50']:.1f} ms, "
        f"p95 {s['guard_ms_p95']:.1f} ms.",
        "",
        "| server | package | calls | FP | broken | session errors | added p50 / p95 ms | "
        "guard p50 / p95 ms | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in s["servers"]:
        note = _cell(v["error"][:160]) if v["error"] else ""
        out.append(
            f"| {v['server']} | `{v['package']}` | {v['run']}/{v['calls']} | {v['fp']} | "
            f"{v['broken']} | {v['session_error']} | {v['added_ms_p50']:.0f} / "
            f"{v['added_ms_p95']:.0f} | {v['guard_ms_p50']:.1f} / {v['guard_ms_p95']:.1f} | "
            f"{note} |"
        )
    if s["fp_by_rule"]:
        out += ["", "## False positives by rule", "", "| rule | calls |", "|---|---:|"]
        out += [f"| {r} | {n} |" for r, n in s["fp_by_rule"].items()]
    for v in s["servers"]:
        if not (v["false_positives"] or v["broken_calls"] or v["session_errors"]):
            continue
        out += ["", f"## {v['server']}"]
        for fp in v["false_positives"]:
            args = json.dumps(fp["arguments"], ensure_ascii=False)[:200]
            out += ["", f"- FP call {fp['call']} `{fp['tool']}` {args}: "
                    f"{', '.join(fp['rules']) or 'no audit record'} ({fp['phase']})"]
            out += [f"  - {_cell(e)[:400]}" for e in fp["evidence"]]
            if fp["task"]:
                out.append(f"  - task: {_cell(fp['task'])[:300]}")
        for b in v["broken_calls"]:
            after = (f" (after the denied call {b['after_fp']}: may follow from it)"
                     if b["after_fp"] is not None else "")
            out += ["", f"- broken call {b['call']} `{b['tool']}`{after}:", "", "```diff",
                    b["diff"], "```"]
        for e in v["session_errors"]:
            out += ["", f"- session error call {e['call']} `{e['tool']}`: {_cell(e['why'])}"]
    return "\n".join(out) + "\n"
