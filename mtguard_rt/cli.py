"""`mtguard` entry point: argparse front, one module per subcommand in `commands/`.

Every `GuardError` becomes one line on stderr and exit code 2; tracebacks are for bugs only.
Subcommand handlers are async and run on trio (the CLI default) unless they say otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from . import commands
from .errors import GuardError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mtguard", description="Runtime guard for MCP tool calls (sandbox + eBPF + audits)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (GuardError, BaseExceptionGroup) as exc:
        error = _guard_error(exc)
        if error is None:
            raise
        print(f"mtguard: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _guard_error(exc: BaseException) -> GuardError | None:
    """The GuardError inside (possibly nested) task-group exception groups, if any."""
    if isinstance(exc, GuardError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _guard_error(inner)) is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
