"""Put `mtguard proxy` in front of every server of an agent host's MCP config, and back.

Reads the server tables hosts write: `mcpServers` (Claude Desktop, Cursor, Claude Code's
`.mcp.json`, and per project in `~/.claude.json`'s `projects`), `servers` (VS Code's
`mcp.json`) and `mcp.servers` (VS Code settings).

- A stdio entry (`command`, `type` absent or "stdio") becomes `MTGUARD proxy --name NAME
  [--env KEY]... [NEEDS] [OPTIONS] -- COMMAND ARGS...`; its `env` stays where the host sets it
  and each key is passed into the sandbox by name (values never land on a command line).
  NEEDS are the sandbox flags `needs.infer_needs` reads off the entry.
- A remote entry (`url`, `type` absent or "http") becomes `MTGUARD proxy --name NAME
  --upstream URL [--upstream-header 'K: V']...`; a bearer `Authorization` header moves to the
  entry's `env` as `MTGUARD_UPSTREAM_TOKEN` (out of `ps`). Other types (`sse`) stay as they are:
  `--upstream` speaks streamable HTTP only.

Wrapping is idempotent and `unwrap_config(wrap_config(c)) == c` for every config (an empty
`args` list and a missing one are the same to every host).
"""

from __future__ import annotations

import copy
import itertools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .needs import Needs, infer_needs

PROXY = "proxy"
STDIO_TYPES = (None, "stdio")
REMOTE_TYPES = (None, "http")
CONTAINER_ENGINES = ("docker", "podman", "nerdctl")
TOKEN_ENV = "MTGUARD_UPSTREAM_TOKEN"  # the proxy's bearer token variable (proxy/remote.py)

Infer = Callable[[str, dict[str, Any], "str | None"], Needs]


@dataclass
class Change:
    """What happened to one server entry, and what was inferred for it (for review)."""

    name: str
    action: str  # "wrapped", "unwrapped", "already wrapped", "not wrapped", "skipped", "left"
    needs: Needs | None = None
    why: str = ""  # for "left": why the entry cannot be wrapped


@dataclass
class Rewrite:
    config: dict[str, Any]
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(c.action in ("wrapped", "unwrapped") for c in self.changes)


@dataclass
class Table:
    servers: dict[str, Any]
    base: str | None  # where the host starts these servers, when the config says


def server_tables(config: dict[str, Any], base: str | None = None) -> list[Table]:
    """The host's server tables inside `config` (one file may hold several). `base` is the
    directory the host starts a project config's servers in; a `projects` map (Claude
    Code's `~/.claude.json`) names each project's own."""
    tables = []
    for holder, key, where in ((config, "mcpServers", base), (config, "servers", base),
                               (config.get("mcp"), "servers", base)):
        table = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(table, dict):
            tables.append(Table(table, where))
    projects = config.get("projects")
    if isinstance(projects, dict):
        for path, project in projects.items():
            table = project.get("mcpServers") if isinstance(project, dict) else None
            if isinstance(table, dict):
                tables.append(Table(table, path if os.path.isabs(path) else None))
    return tables


def is_stdio(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("command"), str)
            and "url" not in entry and entry.get("type") in STDIO_TYPES)


def is_remote(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("url"), str)


def _proxy_args(entry: dict[str, Any]) -> list[str] | None:
    args = entry.get("args")
    name = os.path.basename(str(entry.get("command", "")))
    if (re.fullmatch(r"mtguard(\.exe)?", name) and isinstance(args, list) and args
            and args[0] == PROXY):
        return [str(a) for a in args]
    return None


def is_wrapped(entry: dict[str, Any]) -> bool:
    """True for an entry that already runs `mtguard proxy ... -- ...` or `--upstream`."""
    args = _proxy_args(entry)
    return args is not None and ("--" in args or "--upstream" in args)


def wrap_entry(
    name: str, entry: dict[str, Any], *, mtguard: str = "mtguard",
    options: Sequence[str] = (), needs: Needs | None = None,
) -> dict[str, Any]:
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"server {name!r}: `args` must be a list of strings")
    env = entry.get("env") or {}
    if not isinstance(env, dict):
        raise ValueError(f"server {name!r}: `env` must be an object")
    flags = [PROXY, "--name", name]
    for key in env:
        flags += ["--env", str(key)]
    inferred = needs.flags() if needs else []
    wrapped = dict(entry)  # keeps the host's keys (env, cwd, type, ...) and their order
    wrapped["command"] = mtguard
    wrapped["args"] = [*flags, *inferred, *options, "--", entry["command"], *args]
    return wrapped


def wrap_remote(
    name: str, entry: dict[str, Any], *, mtguard: str = "mtguard", options: Sequence[str] = (),
) -> dict[str, Any]:
    """A `url` entry as a stdio entry running `mtguard proxy --upstream URL`."""
    headers = entry.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ValueError(f"server {name!r}: `headers` must be an object of strings")
    token = headers.get("Authorization", "")
    token_env = token[len("Bearer "):] if token.startswith("Bearer ") else None
    args = [PROXY, "--name", name, "--upstream", entry["url"]]
    for key, value in headers.items():
        if not (key == "Authorization" and token_env is not None):
            args += ["--upstream-header", f"{key}: {value}"]
    args += options
    wrapped: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "type":
            wrapped["type"] = "stdio"
        elif key == "url":
            wrapped["command"], wrapped["args"] = mtguard, args
            if token_env is not None:
                wrapped["env"] = {TOKEN_ENV: token_env}
        elif key != "headers":
            wrapped[key] = value
    return wrapped


def unwrap_entry(entry: dict[str, Any]) -> dict[str, Any]:
    args: list[str] = entry["args"]
    if "--" not in args:
        return _unwrap_remote(entry)
    server = args[args.index("--") + 1 :]
    if not server:
        raise ValueError("a wrapped entry without a server command after `--`")
    restored = dict(entry)
    restored["command"] = server[0]
    if server[1:]:
        restored["args"] = server[1:]
    else:
        del restored["args"]
    return restored


def _unwrap_remote(entry: dict[str, Any]) -> dict[str, Any]:
    args: list[str] = entry["args"]
    headers: dict[str, str] = {}
    env = dict(entry.get("env") or {})
    if TOKEN_ENV in env:
        headers["Authorization"] = f"Bearer {env.pop(TOKEN_ENV)}"
    for flag, value in itertools.pairwise(args):
        if flag == "--upstream-header":
            key, _, val = value.partition(":")
            headers[key.strip()] = val.strip()
    restored: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "type":
            restored["type"] = "http"
        elif key == "command":
            restored["url"] = args[args.index("--upstream") + 1]
            if headers:
                restored["headers"] = headers
        elif key == "env":
            if env:
                restored["env"] = env
        elif key != "args":
            restored[key] = value
    return restored


def wrap_config(
    config: dict[str, Any], *, mtguard: str = "mtguard", options: Sequence[str] = (),
    only: Sequence[str] = (), base: str | None = None, infer: Infer | None = None,
) -> Rewrite:
    """A copy of `config` with its servers wrapped (those in `only`, when given).

    `infer(name, entry, base)` gives each stdio server's sandbox needs (default: none; the
    CLI passes `default_infer`); `base` is where the host starts the config's servers.
    """

    def change(name: str, entry: dict[str, Any], where: str | None) -> _Done:
        if is_remote(entry):
            if entry.get("type") not in REMOTE_TYPES:
                return Change(name, "left", why=f"type {entry.get('type')!r}: --upstream "
                              "speaks streamable HTTP only"), None
            return Change(name, "wrapped"), wrap_remote(name, entry, mtguard=mtguard,
                                                        options=options)
        engine = os.path.basename(str(entry["command"]))
        if engine in CONTAINER_ENGINES:
            return Change(name, "left", why=f"it runs its own {engine} container: the sandbox "
                          "has no container engine, so it would not start under the guard"), None
        needs = infer(name, entry, where) if infer else None
        wrapped = wrap_entry(name, entry, mtguard=mtguard, options=options, needs=needs)
        return Change(name, "wrapped", needs), wrapped

    return _rewrite(config, only, base, want_wrapped=False, skip="already wrapped",
                    change=change)


def unwrap_config(config: dict[str, Any], *, only: Sequence[str] = ()) -> Rewrite:
    return _rewrite(
        config, only, None, want_wrapped=True, skip="not wrapped",
        change=lambda name, entry, _where: (Change(name, "unwrapped"), unwrap_entry(entry)),
    )


_Done = tuple[Change, "dict[str, Any] | None"]


def _rewrite(
    config: dict[str, Any], only: Sequence[str], base: str | None, *, want_wrapped: bool,
    skip: str, change: Callable[[str, dict[str, Any], str | None], _Done],
) -> Rewrite:
    """Apply `change` to every server whose wrapped state is `want_wrapped`."""
    out = copy.deepcopy(config)
    changes = []
    for table in server_tables(out, base):
        for name, entry in table.servers.items():
            if only and name not in only:
                done = Change(name, "skipped")
            elif not (is_stdio(entry) or is_remote(entry)):
                done = Change(name, "left", why="neither a stdio command nor a url")
            elif is_wrapped(entry) != want_wrapped:
                done = Change(name, skip)
            else:
                done, replacement = change(name, entry, table.base)
                if replacement is not None:
                    table.servers[name] = replacement
            changes.append(done)
    return Rewrite(out, changes)


def default_infer(name: str, entry: dict[str, Any], base: str | None) -> Needs:
    return infer_needs(entry, base=base)


__all__ = ["Change", "Rewrite", "Table", "default_infer", "is_remote", "is_stdio",
           "is_wrapped", "server_tables", "unwrap_config", "unwrap_entry", "wrap_config",
           "wrap_entry", "wrap_remote"]
