"""`mtguard demo`: guard four scripted calls end to end and show what happened."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="run the guarded demo (sandbox + eBPF + audits), print the trees"
    )
    p.add_argument(
        "--out", default=".mtguard/demo", help="where the audit log, report and traces go"
    )
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from ..demo import main

    return main(args.out)
