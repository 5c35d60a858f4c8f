"""Put `mtguard proxy` in front of every stdio server of an agent host's MCP config, and back.

Reads the server tables hosts write: `mcpServers` (Claude Desktop, Cursor, Claude Code's
`.mcp.json`), `servers` (VS Code's `mcp.json`) and `mcp.servers` (VS Code settings). A stdio
entry (`command`, no `url`, `type` absent or "stdio") becomes `mtguard proxy --name NAME
[--env KEY]... [OPTIONS] -- COMMAND ARGS...`; its `env` stays where the host sets it and each
key is passed into the sandbox by name (values never land on a command line). Wrapping is
idempotent, and `unwrap_config(wrap_config(c)) == c` for every config (an empty `args` list
and a missing one are the same to every host). Remote servers (`url`) are left alone.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import HostConfigError

PROXY = "proxy"
STDIO_TYPES = (None, "stdio")


@dataclass
class Change:
    """What happened to one server entry."""

    name: str
    action: str  # "wrapped", "unwrapped", "already wrapped", "not wrapped", "remote", "skipped"


@dataclass
class Rewrite:
    config: dict[str, Any]
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(c.action in ("wrapped", "unwrapped") for c in self.changes)


def server_tables(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's server tables inside `config` (one file may hold several)."""
    tables = []
    for holder, key in ((config, "mcpServers"), (config, "servers"),
                        (config.get("mcp"), "servers")):
        table = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(table, dict):
            tables.append(table)
    return tables


def is_stdio(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("command"), str)
            and "url" not in entry and entry.get("type") in STDIO_TYPES)


def is_wrapped(entry: dict[str, Any]) -> bool:
    """True for an entry that already runs `mtguard proxy ... -- ...`."""
    args = entry.get("args")
    name = os.path.basename(str(entry.get("command", "")))
    return (re.fullmatch(r"mtguard(\.exe)?", name) is not None and isinstance(args, list)
            and bool(args) and args[0] == PROXY and "--" in args)


def wrap_entry(
    name: str, entry: dict[str, Any], *, mtguard: str = "mtguard",
    options: Sequence[str] = (),
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
    wrapped = dict(entry)  # keeps the host's keys (env, cwd, type, ...) and their order
    wrapped["command"] = mtguard
    wrapped["args"] = [*flags, *options, "--", entry["command"], *args]
    return wrapped


def unwrap_entry(entry: dict[str, Any]) -> dict[str, Any]:
    args: list[str] = entry["args"]
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


def wrap_config(
    config: dict[str, Any], *, mtguard: str = "mtguard", options: Sequence[str] = (),
    only: Sequence[str] = (),
) -> Rewrite:
    """A copy of `config` with its stdio servers wrapped (those in `only`, when given)."""
    return _rewrite(
        config, only, want_wrapped=False, done="wrapped", skip="already wrapped",
        change=lambda name, entry: wrap_entry(name, entry, mtguard=mtguard, options=options),
    )


def unwrap_config(config: dict[str, Any], *, only: Sequence[str] = ()) -> Rewrite:
    return _rewrite(
        config, only, want_wrapped=True, done="unwrapped", skip="not wrapped",
        change=lambda _name, entry: unwrap_entry(entry),
    )


def _rewrite(
    config: dict[str, Any], only: Sequence[str], *, want_wrapped: bool, done: str, skip: str,
    change: Callable[[str, dict[str, Any]], dict[str, Any]],
) -> Rewrite:
    """Apply `change` to every stdio server whose wrapped state is `want_wrapped`."""
    out = copy.deepcopy(config)
    changes = []
    for table in server_tables(out):
        for name, entry in table.items():
            if only and name not in only:
                action = "skipped"
            elif not is_stdio(entry):
                action = "remote"
            elif is_wrapped(entry) != want_wrapped:
                action = skip
            else:
                table[name] = change(name, entry)
                action = done
            changes.append(Change(name, action))
    return Rewrite(out, changes)


# -- files ------------------------------------------------------------------------------------

_JSONC = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)


def strip_jsonc(text: str) -> tuple[str, bool]:
    """JSON from VS Code's JSON-with-comments (comments and trailing commas dropped)."""
    dropped = False

    def keep(m: re.Match[str]) -> str:
        nonlocal dropped
        if m.group(0).startswith('"'):
            return m.group(0)
        dropped = dropped or m.group(0).startswith("/")
        return ""

    return _JSONC.sub(keep, text), dropped


@dataclass
class HostConfigFile:
    path: Path
    config: dict[str, Any]
    indent: str | int
    had_comments: bool


def read_host_config(path: str | os.PathLike[str]) -> HostConfigFile:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HostConfigError(str(p), f"cannot read: {exc}") from exc
    plain, had_comments = strip_jsonc(text)
    try:
        config = json.loads(plain)
    except json.JSONDecodeError as exc:
        raise HostConfigError(str(p), f"not JSON: line {exc.lineno}: {exc.msg}") from exc
    if not isinstance(config, dict) or not server_tables(config):
        raise HostConfigError(str(p), "no MCP server table (`mcpServers`, `servers` or "
                              "`mcp.servers`) in this file")
    m = re.search(r"^([ \t]+)\S", text, re.M)
    indent: str | int = (m.group(1) if "\t" in m.group(1) else len(m.group(1))) if m else 2
    return HostConfigFile(p, config, indent, had_comments)


INLINE_WIDTH = 100  # a list of scalars that fits in this many columns stays on one line


def render_config(config: dict[str, Any], indent: str | int = 2) -> str:
    """JSON as people write host configs: nested objects indented, short lists inline."""
    step = indent if isinstance(indent, str) else " " * indent
    return _render(config, step, "") + "\n"


def _render(value: Any, step: str, at: str) -> str:
    inner = at + step
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_render(v, step, inner)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{at}}}"
    if isinstance(value, list) and value:
        if not any(isinstance(v, dict | list) for v in value):
            flat = json.dumps(value, ensure_ascii=False)
            if len(inner) + len(flat) <= INLINE_WIDTH:
                return flat
        return "[\n" + ",\n".join(inner + _render(v, step, inner) for v in value) + f"\n{at}]"
    return json.dumps(value, ensure_ascii=False)


def write_host_config(file: HostConfigFile, config: dict[str, Any]) -> Path:
    """Replace the file atomically after copying the original to `<file>.bak`. When the
    existing backup holds exactly `config` (an unwrap after a wrap), its bytes come back,
    comments and layout included."""
    backup = file.path.with_name(file.path.name + ".bak")
    tmp = file.path.with_name(f".{file.path.name}.mtguard-tmp")
    text = render_config(config, file.indent)
    try:
        if backup.is_file():
            old = backup.read_text(encoding="utf-8")
            try:
                if json.loads(strip_jsonc(old)[0]) == config:
                    text = old
            except json.JSONDecodeError:
                pass
        backup.write_bytes(file.path.read_bytes())
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, file.path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise HostConfigError(str(file.path), f"cannot write: {exc.strerror or exc}") from exc
    return backup


__all__ = [
    "Change", "HostConfigFile", "Rewrite", "is_stdio", "is_wrapped", "read_host_config",
    "render_config", "strip_jsonc", "unwrap_config", "unwrap_entry", "wrap_config",
    "wrap_entry", "write_host_config",
]
