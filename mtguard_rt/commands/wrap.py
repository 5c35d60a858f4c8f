"""`mtguard wrap CONFIG.json` / `mtguard unwrap CONFIG.json`: guard a host's MCP servers.

Prints the rewritten config on stdout, or with `--write` replaces the file after saving the
original as `CONFIG.json.bak`. A summary of what happened to each server goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..errors import HostConfigError
from ..hostconfig import (
    Rewrite,
    read_host_config,
    render_config,
    unwrap_config,
    wrap_config,
    write_host_config,
)


def register(sub: Any) -> None:
    w = sub.add_parser(
        "wrap",
        help="rewrite a host's MCP config so every stdio server runs under `mtguard proxy`",
        description="Claude Desktop, Cursor, Claude Code (.mcp.json) and VS Code (mcp.json) "
        "configs. Idempotent: wrapped servers are left as they are.",
    )
    _common(w)
    w.add_argument("--mtguard", default="mtguard", metavar="CMD",
                   help="the mtguard command the host runs (default: mtguard; hosts that do "
                        "not inherit your shell's PATH want an absolute path)")
    w.add_argument("--policy", action="append", default=[], metavar="FILE",
                   help="pass --policy FILE to every proxy (repeatable)")
    w.add_argument("--audit-log", metavar="PATH", help="pass --audit-log PATH to every proxy")
    w.add_argument("--observe", action="store_true", help="pass --observe to every proxy")
    w.add_argument("--proxy-arg", action="append", default=[], metavar="ARG",
                   help="any other proxy option, e.g. --proxy-arg=--network=host (repeatable)")
    w.set_defaults(func=run_wrap)
    u = sub.add_parser(
        "unwrap", help="undo `mtguard wrap`: restore each server's own command",
        description="Restores every wrapped server entry exactly as it was before wrapping.",
    )
    _common(u)
    u.set_defaults(func=run_unwrap)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG.json", help="the host's MCP config file")
    p.add_argument("--write", action="store_true",
                   help="rewrite the file in place (the original is kept as CONFIG.json.bak)")
    p.add_argument("--server", action="append", default=[], metavar="NAME",
                   help="only this server (repeatable; default: all)")


def proxy_options(args: argparse.Namespace) -> list[str]:
    # Hosts start servers from a working directory of their own: paths must be absolute.
    options: list[str] = []
    for policy in args.policy:
        options += ["--policy", os.path.abspath(policy) if os.path.exists(policy) else policy]
    if args.audit_log:
        options += ["--audit-log", os.path.abspath(args.audit_log)]
    if args.observe:
        options.append("--observe")
    for extra in args.proxy_arg:
        if extra == "--" or not extra.startswith("-"):
            raise HostConfigError(args.config, f"--proxy-arg {extra!r} is not a proxy option "
                                  "(write it as --proxy-arg=--option=value)")
        options.append(extra)
    return options


def run_wrap(args: argparse.Namespace) -> int:
    file = read_host_config(args.config)
    options = proxy_options(args)
    try:
        rewrite = wrap_config(file.config, mtguard=args.mtguard, options=options,
                              only=args.server)
    except ValueError as exc:
        raise HostConfigError(args.config, str(exc)) from exc
    return _finish(args, file, rewrite)


def run_unwrap(args: argparse.Namespace) -> int:
    file = read_host_config(args.config)
    try:
        rewrite = unwrap_config(file.config, only=args.server)
    except ValueError as exc:
        raise HostConfigError(args.config, str(exc)) from exc
    return _finish(args, file, rewrite)


def _finish(args: argparse.Namespace, file: Any, rewrite: Rewrite) -> int:
    missing = set(args.server) - {c.name for c in rewrite.changes}
    if missing:
        raise HostConfigError(args.config, f"no server named {', '.join(sorted(missing))}")
    for change in rewrite.changes:
        print(f"mtguard: {change.name}: {change.action}", file=sys.stderr)
    if file.had_comments and (args.write or rewrite.changed):
        print("mtguard: note: comments in the file are not kept", file=sys.stderr)
    if not args.write:
        sys.stdout.write(render_config(rewrite.config, file.indent))
    elif rewrite.changed:
        backup = write_host_config(file, rewrite.config)
        print(f"mtguard: wrote {args.config} (original saved as {backup})", file=sys.stderr)
    else:
        print(f"mtguard: {args.config} unchanged", file=sys.stderr)
    return 0
