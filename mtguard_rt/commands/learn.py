"""`mtguard learn --audit-log PATH [--out FILE] [--min-calls N]`: a behaviour profile.

Reads the audit log, keeps the allowed calls that have a behavior tree (an observe-mode
record that would have been denied is not learned from), and writes per server and tool
what those calls did (programs, path patterns read and written, endpoints, DNS names, most
processes) as a TOML profile to review and then name in `[rules.profile-deviation]` or the
config's `[profile]`. A malformed log line is reported with its number and skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ..audit.profile import dump_profile, learn_profiles
from ..errors import GuardError, TelemetryError
from ..model import AuditRecord, record_decoder
from ..paths import default_audit_log

DEFAULT_AUDIT_LOG = default_audit_log()
DEFAULT_OUT = ".mtguard/profile.toml"
PROGRESS_EVERY = 500  # records between progress lines


def register(sub: Any) -> None:
    p = sub.add_parser(
        "learn",
        help="learn per-tool behaviour profiles from the allowed calls of an audit log",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument(
        "--audit-log",
        default=DEFAULT_AUDIT_LOG,
        metavar="PATH",
        help=f"the audit log to learn from (default {DEFAULT_AUDIT_LOG})",
    )
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="FILE",
        help=f"where to write the profile, - for stdout (default {DEFAULT_OUT})",
    )
    p.add_argument(
        "--min-calls",
        type=int,
        default=3,
        metavar="N",
        help="profile only tools with at least N learned calls (default 3)",
    )
    p.set_defaults(func=run_learn)


class LogReader:
    """The records of an audit log; a malformed line is reported and skipped, not fatal."""

    def __init__(self, path: str, report: TextIO) -> None:
        self.path = path
        self.report = report
        self.lines = 0
        self.malformed = 0

    def __iter__(self) -> Iterator[AuditRecord]:
        try:
            f = open(self.path, "rb")
        except OSError as exc:
            raise TelemetryError(f"cannot read the audit log {self.path}: {exc.strerror}") from exc
        with f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                self.lines += 1
                try:
                    record = record_decoder.decode(line)
                except msgspec.DecodeError as exc:
                    self.malformed += 1
                    print(
                        f"mtguard: {self.path}:{number}: skipped, not an audit record: {exc}",
                        file=self.report,
                    )
                    continue
                if self.lines % PROGRESS_EVERY == 0:
                    print(f"mtguard: read {self.lines} records...", file=self.report, flush=True)
                yield record


def run_learn(args: argparse.Namespace) -> int:
    if args.min_calls < 1:
        raise GuardError("--min-calls must be at least 1")
    reader = LogReader(args.audit_log, sys.stderr)
    spec, stats = learn_profiles(
        reader, min_calls=args.min_calls, source=os.path.abspath(args.audit_log)
    )
    if reader.lines == 0:
        raise TelemetryError(f"the audit log {args.audit_log} is empty: nothing to learn from")
    if stats.used == 0:
        why = ", ".join(f"{n} {reason}" for reason, n in stats.skipped.most_common())
        raise GuardError(
            f"no allowed call with a behavior tree in {args.audit_log} ({why or 'no records'})"
        )
    spec.profile.skipped += reader.malformed
    text = dump_profile(spec)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        out = Path(args.out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise GuardError(f"cannot write the profile {out}: {exc.strerror}") from exc
    tools = sum(len(s.tools) for s in spec.servers.values())
    err = sys.stderr
    print(
        f"mtguard: learned {tools} tool(s) of {len(spec.servers)} server(s) from "
        f"{stats.used} call(s); skipped {sum(stats.skipped.values()) + reader.malformed} "
        f"record(s)",
        file=err,
    )
    for reason, n in stats.skipped.most_common():
        print(f"  skipped {n}: {reason}", file=err)
    if reader.malformed:
        print(f"  skipped {reader.malformed}: malformed line(s)", file=err)
    for server, sp in spec.servers.items():
        for tool, tp in sp.tools.items():
            print(
                f"  {server}.{tool}: {tp.calls} call(s), {len(tp.exes)} program(s), "
                f"{len(tp.read)} read / {len(tp.write)} write pattern(s), "
                f"{len(tp.endpoints)} endpoint(s), {len(tp.dns)} name(s), "
                f"at most {tp.max_processes} process(es)",
                file=err,
            )
    for dropped in stats.dropped_tools:
        print(f"  no profile for {dropped}: fewer than --min-calls {args.min_calls}", file=err)
    if args.out != "-":
        print(
            f"mtguard: wrote {args.out}; review it, then set [rules.profile-deviation] "
            f'profile = "{args.out}" (mode observe, or enforce)',
            file=err,
        )
    return 0
