"""`mtguard eval [--domain browser|financial] [--sources server,host,user] [--out DIR]`

Replays the MCP-SafetyBench scenarios (plus the 16 tool-call-hook cases) through one guard on
real sandboxed servers, then prints the report and writes `DIR/report.md`, `DIR/report.json`
and the raw per-call records `DIR/run.json`. `--from RUN.json` re-renders a recorded run
(baselines replay on its records) without running anything. Progress goes to stderr.

`mtguard eval --suite real [--server NAME ...] [--set core|held-out] [--out DIR]` runs the
benign real-server suite instead: each registry server's session unguarded and through
`mtguard proxy`, compared call by call; `DIR/report.md` and `DIR/report.json` list false
positives (rule, evidence), broken calls and added latency, `DIR/run.json` the raw results
(`--from` re-renders it); the exit code is 1 if any call was denied or broken.

`mtguard eval --suite own [--set dev|held-out|held-out-2|held-out-3|held-out-4|all]
[--cases ID,...] [--out DIR]` replays our own attack corpus of the classes the paper corpus lacks
(mtguard_rt/eval/owncorpus), reported apart: per class and per source DR, FPR with its 95%
upper bound, the rules behind each catch and every miss; `--set held-out`, `held-out-2`,
`held-out-3` or `held-out-4` runs a set written blind to the rules (default: dev).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ..errors import GuardError

if TYPE_CHECKING:
    from ..eval.runner import EvalOptions, EvalRun
    from ..eval.scenario import Scenario

DOMAINS = ("browser", "financial")
SOURCES = ("server", "host", "user")


def _sources(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in SOURCES]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"sources are {', '.join(SOURCES)}; got {text!r}")
    return items


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "eval",
        help="replay the attack corpus through the guard (DR/FPR tables with baselines), or "
        "run the benign real-server suite (--suite real)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument(
        "--suite",
        choices=("corpus", "real", "own"),
        default="corpus",
        help="corpus: the attack corpus (default); real: the benign real-server suite; "
        "own: our own attack corpus of unseen classes (reported apart)",
    )
    p.add_argument(
        "--server",
        action="append",
        metavar="NAME",
        help="--suite real: only this server's session (repeatable; default: all)",
    )
    p.add_argument(
        "--set",
        choices=("core", "dev", "held-out", "held-out-2", "held-out-3", "held-out-4", "all"),
        action="append",
        help="--suite real: only the sessions of this set, core or held-out (repeatable; "
        "default: all); --suite own: dev (default), held-out, held-out-2, held-out-3 or "
        "held-out-4 (each written blind to the rules) or all",
    )
    p.add_argument(
        "--sessions",
        metavar="DIR",
        help="--suite real: session files (default: the shipped ones)",
    )
    p.add_argument(
        "--domain",
        choices=DOMAINS,
        action="append",
        help="only this domain (repeatable; default: both)",
    )
    p.add_argument(
        "--sources",
        type=_sources,
        default=list(SOURCES),
        help="attack sources, comma-separated (default: server,host,user)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where to write the report (default: eval-out, or eval-out-real for --suite real)",
    )
    p.add_argument(
        "--corpus", metavar="DIR", help="MCP-SafetyBench folder (default: ../shared/...)"
    )
    p.add_argument("--cases", metavar="ID,...", help="only these case ids (comma-separated)")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="TOML",
        help="policy file(s) for the guard (default: balanced)",
    )
    p.add_argument("--no-enforce", action="store_true", help="skip the enforce-mode passes")
    p.add_argument(
        "--audit-log",
        metavar="PATH",
        help="also write every call's audit record, behavior tree included, to this JSONL "
        "file (joined to run.json by call_id; input of `mtguard learn` and bench.profile_split)",
    )
    p.add_argument(
        "--from",
        dest="from_run",
        metavar="RUN.json",
        help="render a recorded run instead of running",
    )
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from ..eval.report import render_json, render_markdown
    from ..eval.runner import EvalOptions, run_decoder, run_encoder

    if args.suite == "real":
        return _real_suite(args)
    if args.suite == "own":
        from ..eval.owncorpus.cli import run_own_suite

        return run_own_suite(args)
    out = Path(args.out or "eval-out")
    if args.from_run:
        try:
            run = run_decoder.decode(Path(args.from_run).read_bytes())
        except (OSError, ValueError) as exc:
            raise GuardError(f"cannot read the recorded run {args.from_run}: {exc}") from exc
    else:
        from ..eval.corpus import load_scenarios

        scenarios = load_scenarios(args.corpus)
        if args.cases:
            wanted = {c.strip() for c in args.cases.split(",") if c.strip()}
            unknown = wanted - {s.case_id for s in scenarios}
            if unknown:
                raise GuardError(f"unknown case id(s): {', '.join(sorted(unknown))}")
            scenarios = [s for s in scenarios if s.case_id in wanted]
        options = EvalOptions(
            domains=list(args.domain or DOMAINS),
            sources=list(args.sources),
            policies=[str(Path(p).resolve()) for p in args.policy],
            enforce=not args.no_enforce,
            audit_log=str(Path(args.audit_log).resolve()) if args.audit_log else None,
            command="mtguard " + shlex.join(sys.argv[1:])
            if sys.argv[1:2] == ["eval"]
            else "mtguard eval",
        )
        out.mkdir(parents=True, exist_ok=True)
        run = anyio.run(_run, scenarios, options, backend="trio")
        (out / "run.json").write_bytes(run_encoder.encode(run))
    out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(run)
    (out / "report.md").write_text(markdown)
    (out / "report.json").write_text(render_json(run))
    print(markdown)
    print(f"wrote {out / 'report.md'}, {out / 'report.json'}", file=sys.stderr)
    return 0


async def _run(scenarios: list[Scenario], options: EvalOptions) -> EvalRun:
    from ..eval.runner import run_evaluation

    return await run_evaluation(scenarios, options, progress=sys.stderr)


def _real_suite(args: argparse.Namespace) -> int:
    from ..eval.realsuite.report import failed, render_json, render_markdown
    from ..eval.realsuite.runner import run_suite, suite_decoder, suite_encoder
    from ..eval.realsuite.session import load_sessions

    corpus_only = {"--domain": args.domain, "--cases": args.cases, "--corpus": args.corpus,
                   "--policy": args.policy,
                   "--audit-log": args.audit_log, "--no-enforce": args.no_enforce}
    own_sets = sorted(set(args.set or []) - {"core", "held-out"})
    if own_sets:
        corpus_only[f"--set {', '.join(own_sets)}"] = True  # sets of --suite own
    given = [flag for flag, value in corpus_only.items() if value]
    if given:  # the suite runs the default policy in enforce mode, by design
        raise GuardError(f"{', '.join(given)}: not for --suite real (the corpus mode's options)")
    out = Path(args.out or "eval-out-real")
    if args.from_run:  # re-render a recorded run
        try:
            run = suite_decoder.decode(Path(args.from_run).read_bytes())
        except (OSError, ValueError) as exc:
            raise GuardError(f"cannot read the recorded run {args.from_run}: {exc}") from exc
        out.mkdir(parents=True, exist_ok=True)
    else:
        sessions = load_sessions(args.server, args.sessions, args.set)
        if not sessions:
            raise GuardError(f"no session of set {', '.join(args.set)} among those chosen")
        out.mkdir(parents=True, exist_ok=True)
        command = "mtguard " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["eval"] else ""
        run = anyio.run(lambda: run_suite(sessions, command=command), backend="trio")
        (out / "run.json").write_bytes(suite_encoder.encode(run))
    markdown = render_markdown(run)
    (out / "report.md").write_text(markdown)
    (out / "report.json").write_text(render_json(run))
    print(markdown)
    print(f"wrote {out / 'report.md'}, {out / 'report.json'}; workspaces and audit logs in "
          f"{run.workdir}", file=sys.stderr)
    return 1 if failed(run) else 0
