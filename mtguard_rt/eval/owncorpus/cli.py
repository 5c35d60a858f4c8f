"""`mtguard eval --suite own`: run (or re-render with --from) the own corpus, write the report.

`--set dev` (default: the cases the rules are written against), `held-out`, `held-out-2`,
`held-out-3` and `held-out-4` (each written blind to the rules, run and never tuned for) or
`all`; the report names the set it ran (two or more sets chosen run `all`).

`DIR/report.md`, `DIR/report.json` and the raw `DIR/run.json` (default DIR: eval-out-own).
The paper corpus's options are refused rather than ignored; `--cases` picks a subset.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import anyio

from ...errors import GuardError
from .cases import load_set
from .replay import run_decoder, run_encoder, run_own
from .report import render_json, render_markdown


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False,
                             cwd=Path(__file__).resolve().parent)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def run_own_suite(args: argparse.Namespace) -> int:
    other = {"--domain": args.domain, "--corpus": args.corpus, "--policy": args.policy,
             "--audit-log": args.audit_log, "--server": args.server,
             "--sessions": args.sessions}  # fmt: skip
    given = [flag for flag, value in other.items() if value]
    if given:
        raise GuardError(f"{', '.join(given)}: not for --suite own")
    chosen = set(args.set or ["dev"])
    if "core" in chosen:
        raise GuardError("--set core: a set of --suite real; --suite own has dev, held-out, "
                         "held-out-2, held-out-3, held-out-4, all")
    name = "all" if "all" in chosen or len(chosen) > 1 else chosen.pop()
    out = Path(args.out or "eval-out-own")
    if args.from_run:
        try:
            run = run_decoder.decode(Path(args.from_run).read_bytes())
        except (OSError, ValueError) as exc:
            raise GuardError(f"cannot read the recorded run {args.from_run}: {exc}") from exc
    else:
        cases, personas = load_set(name)
        if args.cases:
            wanted = {c.strip() for c in args.cases.split(",") if c.strip()}
            unknown = wanted - {c.id for c in cases}
            if unknown:
                raise GuardError(f"unknown case id(s): {', '.join(sorted(unknown))}")
            cases = [c for c in cases if c.id in wanted]
        command = "mtguard " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["eval"] else ""
        commit = _commit()  # before the run: what the replay imported
        run = anyio.run(lambda: run_own(cases, personas=personas, command=command),
                        backend="trio")  # fmt: skip
        run.commit, run.set = commit, name
        out.mkdir(parents=True, exist_ok=True)
        (out / "run.json").write_bytes(run_encoder.encode(run))
    out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(run)
    (out / "report.md").write_text(markdown)
    (out / "report.json").write_text(render_json(run))
    print(markdown)
    print(f"wrote {out / 'report.md'}, {out / 'report.json'}", file=sys.stderr)
    return 0
