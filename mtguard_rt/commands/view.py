"""`mtguard view AUDIT.jsonl`: the audit log as coloured terminal trees, or an HTML report.

Filters combine (`--denied`, `--tool`, `--call`). Colour only on a TTY unless `--color` or
`--no-color` says otherwise. `--html FILE` writes one self-contained page instead (call
bodies built on demand from one compact data block: ~11 KB per call on the real-server
suite). A call whose server never answered reads ERROR, not ALLOW. A malformed log line is
one error line naming file and line (exit 2), not a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import TelemetryError
from ..model import AuditRecord
from ..telemetry.auditlog import read_audit_log
from ..telemetry.view_html import render_html
from ..telemetry.view_text import render_text


def register(sub: Any) -> None:
    p = sub.add_parser(
        "view",
        help="show an audit log as trees (terminal) or as an HTML report",
        description="Show guarded calls from an audit log (JSON Lines) with their behavior trees.",
    )
    p.add_argument("audit", metavar="AUDIT.jsonl", help="audit log written by the guard")
    p.add_argument("--denied", action="store_true", help="only denied calls")
    p.add_argument("--tool", metavar="T", help="only calls of this tool")
    p.add_argument("--call", metavar="ID", help="only the call with this call id or JSON-RPC id")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report to FILE")
    p.add_argument("--compact", action="store_true",
                   help="hide noise such as shared-library and locale loads and loopback "
                   "traffic (policies/noise.toml); default: every event")
    p.add_argument(
        "--color", action=argparse.BooleanOptionalAction, default=None,
        help="colour the terminal output (default: only on a TTY)",
    )
    p.set_defaults(func=run_view)


def select(
    records: Iterable[AuditRecord], *, denied: bool = False, tool: str | None = None,
    call: str | None = None,
) -> Iterator[AuditRecord]:
    for r in records:
        if denied and r.decision != "deny":
            continue
        if tool is not None and r.tool != tool:
            continue
        if call is not None and call not in (r.call_id, r.request_id):
            continue
        yield r


def without_noise(records: list[AuditRecord]) -> list[AuditRecord]:
    """The same records with each tree reduced by the monitor's noise rules."""
    import msgspec

    from ..monitor.simplify import load_noise, simplify

    noise = load_noise()
    return [msgspec.structs.replace(r, tree=simplify(r.tree, noise)) if r.tree else r
            for r in records]


def run_view(args: argparse.Namespace) -> int:
    records = list(
        select(read_audit_log(args.audit), denied=args.denied, tool=args.tool, call=args.call)
    )
    if args.compact:
        records = without_noise(records)
    if args.html:
        page = render_html(records, source=os.path.basename(args.audit))
        try:
            Path(args.html).write_text(page, encoding="utf-8")
        except OSError as exc:
            raise TelemetryError(f"cannot write {args.html}: {exc.strerror}") from exc
        print(f"wrote {args.html} ({len(records)} calls)")
        return 0
    if not records:
        print("no matching calls", file=sys.stderr)
        return 0
    color = sys.stdout.isatty() if args.color is None else bool(args.color)
    sys.stdout.write(render_text(records, color=color))
    return 0
