"""`mtguard proxy [options] -- SERVER_CMD...`: guard one MCP server for a host over stdio.

`--listen HOST:PORT` serves streamable HTTP instead of stdio; `--upstream URL` guards a server
that speaks streamable HTTP itself (no sandbox) instead of running SERVER_CMD.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help="serve MCP on stdio; run SERVER_CMD in the sandbox and guard every tools/call",
        description="Drop-in for a host's mcpServers entry: "
        '"command": "mtguard", "args": ["proxy", "--", "npx", "some-server"]',
    )
    add_guard_options(p)
    p.add_argument("--name", help="server name in audit records (default: from the command)")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve MCP over streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    p.add_argument(
        "--token",
        help="bearer token HTTP clients must send (required when --listen "
        "is not loopback; default: $MTGUARD_HTTP_TOKEN)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser Origin allowed besides loopback ones (repeatable)",
    )
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="guard the streamable HTTP MCP server at this http(s) URL instead of running "
        "SERVER_CMD in a sandbox (no sandbox, no behavior tree: post rules needing one are "
        "skipped)",
    )
    p.add_argument(
        "--upstream-header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="HTTP header sent to the --upstream server, e.g. 'Authorization: Bearer ...' "
        "(repeatable; never logged; $MTGUARD_UPSTREAM_TOKEN sets a bearer token without "
        "putting it in argv)",
    )
    p.add_argument(
        "--session",
        metavar="NAME",
        help="the agent session this server joins: the cross-server rules see every server "
        "of it (default: the host process's, so one host's proxies share one; 'off': none)",
    )
    p.add_argument("server", nargs=argparse.REMAINDER, metavar="-- SERVER_CMD...")
    p.set_defaults(func=handler)


def add_guard_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="guard config file (TOML)")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="policy file; repeat to layer (default: the balanced preset)",
    )
    p.add_argument(
        "--audit-log",
        help="JSON Lines audit log (default $XDG_STATE_HOME/mtguard/audit.jsonl, else "
        "~/.local/state/mtguard/audit.jsonl)",
    )
    p.add_argument("--observe", action="store_true", help="record verdicts, block nothing")
    p.add_argument("--image", help="sandbox image (default: mtguard-rt/sandbox, built offline)")
    p.add_argument("--network", choices=["none", "host"], help="sandbox network (default none)")
    p.add_argument(
        "--allow-domain",
        action="append",
        default=[],
        metavar="NAME",
        help="host the server may reach, and only these (repeatable; subdomains included, "
        "IP literals too): enforced in the kernel, everything else refused and reported",
    )
    p.add_argument("--workspace", help="host directory mounted read-write in the sandbox")
    p.add_argument(
        "--user",
        metavar="UID[:GID]",
        help="run the server as this user (default: the workspace's owner, or 1000:1000 "
        "without one or when root owns it; never root)",
    )
    p.add_argument(
        "--rollback",
        choices=["off", "tree", "scan"],
        help="undo a denied call's changes to the workspace (README: Rollback)",
    )
    p.add_argument(
        "--mount",
        action="append",
        default=[],
        metavar="DIR",
        help="extra host directory mounted read-only (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY[=VALUE]",
        help="environment variable for the sandboxed server; KEY alone passes the "
        "proxy's own value (repeatable)",
    )
    p.add_argument("--task", help="task text for calls that carry none in _meta")


def config_from_args(args: argparse.Namespace) -> Any:
    import os

    from ..config import load_config
    from ..errors import GuardError

    config = load_config(args.config)
    if args.policy:
        config.policies = [p if _preset_name(p) else os.path.abspath(p) for p in args.policy]
    if args.audit_log:
        config.audit_log = args.audit_log
    if args.observe:
        config.observe = True
    if args.image:
        config.sandbox.image = args.image
    if args.network:
        config.sandbox.network = args.network
    config.sandbox.allow_domains += [d for d in args.allow_domain if d]
    if args.workspace:
        if not os.path.isdir(args.workspace):
            raise GuardError(f"--workspace {args.workspace!r} is not a directory")
        config.sandbox.workspace = os.path.abspath(args.workspace)
    if args.rollback:
        config.sandbox.rollback = args.rollback
    if args.user:
        config.sandbox.user = args.user
    config.sandbox.mounts += [os.path.abspath(m) for m in args.mount]
    for item in args.env:
        key, sep, value = item.partition("=")
        if not key:
            raise GuardError(f"--env wants KEY=VALUE or KEY, got {item!r}")
        if not sep:  # KEY alone: the proxy's own value (how `mtguard wrap` passes host env)
            if key not in os.environ:
                raise GuardError(f"--env {key}: {key} is not set in the proxy's environment")
            value = os.environ[key]
        config.sandbox.env[key] = value
    if args.task:
        config.task = args.task
    return config


def _preset_name(ref: str) -> bool:
    """`--policy strict`: a shipped preset's bare name, not a file in the working directory."""
    import os

    return not os.path.exists(ref) and "/" not in ref and not ref.endswith(".toml")


def server_command(args: argparse.Namespace) -> list[str]:
    import os

    from ..errors import GuardError

    command = list(args.server)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise GuardError("no server command: use `mtguard proxy [options] -- SERVER_CMD...`")
    if "/" in command[0] and not os.path.isabs(command[0]):
        command[0] = os.path.abspath(command[0])  # the sandbox's working directory differs
    return command


def upstream_from_args(args: argparse.Namespace) -> tuple[str | None, dict[str, str]]:
    """`--upstream URL` and its headers; (None, {}) for a sandboxed SERVER_CMD."""
    import os

    from ..errors import GuardError

    if args.upstream is None:
        if args.upstream_header:
            raise GuardError("--upstream-header needs --upstream URL")
        return None, {}
    from ..proxy.remote import check_upstream_url, upstream_headers  # the MCP SDK: only here
    url = check_upstream_url(args.upstream)
    if [a for a in args.server if a != "--"]:
        raise GuardError("give either --upstream URL or -- SERVER_CMD, not both")
    sandbox_only = [
        flag
        for flag, value in (
            ("--image", args.image), ("--network", args.network),
            ("--allow-domain", args.allow_domain),
            ("--workspace", args.workspace), ("--mount", args.mount), ("--env", args.env),
            ("--rollback", args.rollback), ("--user", args.user),
        )
        if value
    ]
    if sandbox_only:
        raise GuardError(
            f"{', '.join(sandbox_only)} configure the sandbox; an --upstream server runs "
            "outside mtguard and has none"
        )
    return url, upstream_headers(args.upstream_header, os.environ)


def handler(args: argparse.Namespace) -> int:
    import os

    from ..agent.client import agent_on_demand

    if agent_on_demand() and args.upstream is None:  # its compile overlaps our imports
        from ..agent.protocol import agent_socket_path
        from ..agent.spawn import start_early

        start_early(agent_socket_path())
    import trio

    from ..proxy.stdio import serve_stdio

    url, headers = upstream_from_args(args)
    config = config_from_args(args)
    if args.session or config.session is None:  # one host's proxies: one session
        from ..agent.session_client import session_name

        config.session = session_name(args.session, os.getppid())
    command = [] if url else server_command(args)
    if args.listen:
        from ..proxy.http import parse_listen, serve_http

        host, port = parse_listen(args.listen)
        token = args.token or os.environ.get("MTGUARD_HTTP_TOKEN") or None
        trio.run(
            lambda: serve_http(
                config,
                command,
                host=host,
                port=port,
                name=args.name,
                token=token,
                allowed_origins=args.allow_origin,
                upstream_url=url,
                upstream_headers=headers,
            )
        )
        return 0
    trio.run(
        lambda: serve_stdio(
            config, command, name=args.name, upstream_url=url, upstream_headers=headers
        )
    )
    return 0
