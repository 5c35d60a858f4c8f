"""`mtguard wrap CONFIG.json` / `mtguard unwrap CONFIG.json`: guard a host's MCP servers.

Without `--write` nothing is written: the diff `--write` would apply goes to stdout (or the
whole new config with `--print`) and, on stderr, what happened to each server and the sandbox
flags inferred for it, with the reasons, for review. `--write` replaces the file after saving
it as a new numbered backup (`CONFIG.json.bak`, `.bak.2`, ...; none is ever overwritten).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from ..errors import HostConfigError
from ..hostconfig import (
    HostConfigFile,
    Needs,
    Rewrite,
    config_diff,
    infer_needs,
    read_host_config,
    render_config,
    unwrap_config,
    without_network_flags,
    wrap_config,
    write_host_config,
)

# Inferred flags the user's own proxy options replace (a given --network host allows every
# host, so no --allow-domain is inferred beside it).
REPLACED_BY = {"--workspace": ("--workspace",), "--allow-domain": ("--network",)}


def register(sub: Any) -> None:
    w = sub.add_parser(
        "wrap",
        help="rewrite a host's MCP config so every server runs under `mtguard proxy`",
        description="Claude Desktop, Cursor, Claude Code (.mcp.json, ~/.claude.json) and VS "
        "Code (mcp.json, settings) configs. Stdio servers get the sandbox flags they need "
        "(workspace, mounts, network), inferred from the entry and printed for review; `url` "
        "servers run through `--upstream`. Idempotent: wrapped servers are left as they are.",
    )
    _common(w)
    w.add_argument("--mtguard", metavar="CMD",
                   help="the mtguard command the host runs (default: this mtguard's absolute "
                        "path; hosts do not inherit your shell's PATH)")
    w.add_argument("--no-infer", action="store_true",
                   help="add no inferred --workspace/--mount/--allow-domain flags")
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
    how = p.add_mutually_exclusive_group()
    how.add_argument("--write", action="store_true",
                     help="rewrite the file in place (the original is kept as a new numbered "
                          "backup: CONFIG.json.bak, CONFIG.json.bak.2, ...)")
    how.add_argument("--dry-run", action="store_true",
                     help="show the diff --write would apply and change nothing (the default)")
    how.add_argument("--print", action="store_true",
                     help="print the whole rewritten config instead of a diff")
    p.add_argument("--server", action="append", default=[], metavar="NAME",
                   help="only this server (repeatable; default: all)")


def guard_command() -> str:
    """The absolute path of the running mtguard, for hosts that start it without a shell."""
    argv0 = sys.argv[0]
    if re.fullmatch(r"mtguard(\.exe)?", os.path.basename(argv0)) and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    beside = Path(sys.executable).parent / "mtguard"  # the venv's bin (python -m, tests)
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mtguard")
    return os.path.abspath(found) if found else "mtguard"


def proxy_flags() -> set[str]:
    """The options this mtguard's `proxy` accepts: only those are ever emitted."""
    from . import proxy

    holder = argparse.ArgumentParser(add_help=False)
    proxy.register(holder.add_subparsers())
    sub = next(a for a in holder._actions if isinstance(a, argparse._SubParsersAction))
    return {s for a in sub.choices["proxy"]._actions for s in a.option_strings}


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


def make_infer(options: list[str], accepted: set[str]) -> Any:
    given = {o.partition("=")[0] for o in options}

    def infer(_name: str, entry: dict[str, Any], base: str | None) -> Needs:
        needs = infer_needs(entry, base=base)
        if "--allow-domain" not in accepted:
            needs = without_network_flags(needs)
        needs.found = [n for n in needs.found
                       if not given & set(REPLACED_BY.get(n.flags[0], ()))]
        return needs

    return infer


def run_wrap(args: argparse.Namespace) -> int:
    file = read_host_config(args.config)
    options = proxy_options(args)
    mtguard = args.mtguard or guard_command()
    infer = None if args.no_infer else make_infer(options, proxy_flags())
    try:
        rewrite = wrap_config(file.config, mtguard=mtguard, options=options, only=args.server,
                              base=file.base, infer=infer)
    except ValueError as exc:
        raise HostConfigError(args.config, str(exc)) from exc
    if not os.path.isabs(mtguard) and rewrite.changed:
        print(f"mtguard: note: {mtguard!r} is not an absolute path: the host must find it on "
              "its own PATH (use --mtguard /path/to/mtguard)", file=sys.stderr)
    return _finish(args, file, rewrite)


def run_unwrap(args: argparse.Namespace) -> int:
    file = read_host_config(args.config)
    try:
        rewrite = unwrap_config(file.config, only=args.server)
    except ValueError as exc:
        raise HostConfigError(args.config, str(exc)) from exc
    return _finish(args, file, rewrite)


def review(rewrite: Rewrite) -> list[str]:
    """One line per server, then its inferred flags with their reasons, then its notes."""
    lines = []
    for change in rewrite.changes:
        lines.append(f"{change.name}: {change.action}" + (f" ({change.why})" if change.why
                                                          else ""))
        if change.needs:
            for need in change.needs.found:
                lines.append(f"    {' '.join(need.flags):<40} {need.reason}")
            lines += [f"    note: {note}" for note in change.needs.notes]
    return lines


def _finish(args: argparse.Namespace, file: HostConfigFile, rewrite: Rewrite) -> int:
    missing = set(args.server) - {c.name for c in rewrite.changes}
    if missing:
        raise HostConfigError(args.config, f"no server named {', '.join(sorted(missing))}")
    for line in review(rewrite):
        print(f"mtguard: {line}", file=sys.stderr)
    if file.had_comments and rewrite.changed:
        print("mtguard: note: comments in the file are not kept", file=sys.stderr)
    if args.print:
        sys.stdout.write(render_config(rewrite.config, file.indent))
    elif not args.write:
        sys.stdout.write(config_diff(file, rewrite.config))
        if rewrite.changed:
            print("mtguard: dry run: nothing written; add --write to apply", file=sys.stderr)
    elif rewrite.changed:
        backup = write_host_config(file, rewrite.config)
        print(f"mtguard: wrote {args.config} (original saved as {backup})", file=sys.stderr)
    else:
        print(f"mtguard: {args.config} unchanged", file=sys.stderr)
    return 0
