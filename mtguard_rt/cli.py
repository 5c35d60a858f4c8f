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


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a subcommand, only that one's module is imported (a
    proxy's start does not pay for every other subcommand's imports: seconds under load)."""
    parser = argparse.ArgumentParser(
        prog="mtguard", description="Runtime guard for MCP tool calls (sandbox + eBPF + audits)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__))
    first = argv[0] if argv else None
    for name in [first] if first in names else names:
        module = importlib.import_module(f"{commands.__name__}.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
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
