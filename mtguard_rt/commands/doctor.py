"""`mtguard doctor`: prerequisite table with fixes; non-zero exit when a required check fails."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "doctor", help="check prerequisites (root, eBPF, Docker, image) and print fixes"
    )
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from ..doctor import render, run_checks

    checks = run_checks()
    print(render(checks, color=sys.stdout.isatty()))
    return 1 if any(c.required and not c.ok for c in checks) else 0
