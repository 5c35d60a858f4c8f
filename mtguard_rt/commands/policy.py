"""`mtguard policy check|explain|list`: what a policy enforces, and why a call was decided.

`check FILE...` layers the files as `mtguard proxy --policy ...` would (a first file extends
balanced unless it says otherwise; bare names are presets), validates them (errors name the
file and line) and prints the effective rules. `explain CALL_ID --audit-log PATH` finds the
call by its call id or JSON-RPC request id and says why it was allowed or denied.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import asdict
from typing import Any

from ..audit.describe import describe_policy, render_policy
from ..audit.loader import load_policy, policies_dir
from ..errors import TelemetryError
from ..paths import default_audit_log
from ..telemetry.auditlog import read_audit_log
from ..telemetry.explain import explain_record
from ..telemetry.view_text import render_text

DEFAULT_AUDIT_LOG = default_audit_log()


def register(sub: Any) -> None:
    p = sub.add_parser("policy", help="check policy files, list presets, explain a decision")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    c = verbs.add_parser(
        "check", help="validate policy files and show the effective rules",
        description="Layer FILEs in order (as repeated `proxy --policy` does), validate them "
        "and print each rule's mode, the layer that set it, and the lists in force. "
        "A bare name (strict, finance, ...) is a shipped preset.",
    )
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--full", action="store_true", help="every list item, untruncated")
    c.add_argument("--json", action="store_true", help="the effective policy as JSON")
    c.set_defaults(func=run_check)
    e = verbs.add_parser(
        "explain", help="why a call in the audit log was allowed or denied",
        description="Rules fired with mode and phase, their evidence and the tree nodes it "
        "names, the tree's completeness and the per-stage timings.",
    )
    e.add_argument("call", metavar="CALL_ID", help="the call id or the host's JSON-RPC id")
    e.add_argument("--audit-log", default=DEFAULT_AUDIT_LOG, metavar="PATH",
                   help=f"the audit log (default {DEFAULT_AUDIT_LOG})")
    e.add_argument("--tree", action="store_true", help="also draw the whole behavior tree")
    e.set_defaults(func=run_explain)
    ls = verbs.add_parser("list", help="the shipped presets and what each is for")
    ls.set_defaults(func=run_list)


def run_check(args: argparse.Namespace) -> int:
    policy = load_policy(args.files)
    if args.json:
        json.dump(asdict(describe_policy(policy)), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_policy(policy, full=args.full))
    print(f"mtguard: policy OK ({len(policy.sources)} layer(s))", file=sys.stderr)
    return 0


def run_explain(args: argparse.Namespace) -> int:
    found = [r for r in read_audit_log(args.audit_log)
             if args.call in (r.call_id, r.request_id)]
    if not found:
        raise TelemetryError(f"no call {args.call!r} in {args.audit_log}")
    for i, record in enumerate(found):
        if i:
            sys.stdout.write("\n")
        sys.stdout.write(explain_record(record))
        if args.tree:
            sys.stdout.write(render_text([record], color=False))
    return 0


def run_list(args: argparse.Namespace) -> int:
    for path in sorted(policies_dir().glob("*.toml")):
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if "description" in raw:  # noise.toml and other data files are not policies
            print(f"{path.stem:<12} {raw['description']}")
    return 0
