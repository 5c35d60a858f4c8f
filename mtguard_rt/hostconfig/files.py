"""Host config files: read (JSON with comments), render as people write them, show the change
as a diff, and replace atomically keeping every earlier version as a numbered backup.

Backups are never overwritten: the first is `FILE.bak`, later ones `FILE.bak.2`, `FILE.bak.3`,
..., each created exclusively with the original's mode and owner (host configs can hold
tokens; a root-run `wrap` must not leave a user's file owned by root).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HostConfigError
from .entries import server_tables

_JSONC = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)
PROJECT_DIRS = (".vscode", ".cursor")  # a project's own host config lives in one of these
INLINE_WIDTH = 100  # a list of scalars that fits in this many columns stays on one line


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
    text: str = ""
    base: str | None = None  # where the host starts this file's servers, when known


def project_dir(path: Path, home: str | None = None) -> str | None:
    """The directory a project-level config's servers start in: the folder holding
    `.mcp.json`, or the parent of `.vscode/` / `.cursor/` (not the home directory: that is
    a user-level config, whose servers start wherever the host does)."""
    path = path.resolve()
    home = os.path.normpath(home or os.path.expanduser("~"))
    if path.name == ".mcp.json":
        return str(path.parent)
    if path.parent.name in PROJECT_DIRS and str(path.parent.parent) != home:
        return str(path.parent.parent)
    return None


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
    return HostConfigFile(p, config, indent, had_comments, text, project_dir(p))


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


def backups(path: Path) -> list[Path]:
    """The existing backups of `path`, oldest first."""
    found = []
    for p in path.parent.glob(f"{glob_escape(path.name)}.bak*"):
        m = re.fullmatch(re.escape(path.name) + r"\.bak(?:\.(\d+))?", p.name)
        if m and p.is_file():
            found.append((int(m.group(1) or 1), p))
    return [p for _, p in sorted(found)]


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def planned_text(file: HostConfigFile, config: dict[str, Any]) -> str:
    """What `write_host_config` would write: the rendered config, or, when an earlier
    backup holds exactly `config` (an unwrap after a wrap), that backup's own bytes
    (comments and layout included)."""
    for backup in reversed(backups(file.path.resolve())):
        try:
            old = backup.read_text(encoding="utf-8")
            if json.loads(strip_jsonc(old)[0]) == config:
                return old
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
    return render_config(config, file.indent)


def config_diff(file: HostConfigFile, config: dict[str, Any]) -> str:
    """A unified diff of the file as it is against what `--write` would make it."""
    name = str(file.path)
    return "".join(difflib.unified_diff(
        file.text.splitlines(keepends=True), planned_text(file, config).splitlines(keepends=True),
        fromfile=name, tofile=f"{name} (after --write)"))


def _create_backup(path: Path, data: bytes, st: os.stat_result) -> Path:
    n = len(backups(path)) + 1
    while True:
        backup = path.with_name(path.name + (".bak" if n == 1 else f".bak.{n}"))
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            n += 1
            continue
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        _same_owner(backup, st)
        return backup


def _same_owner(path: Path, st: os.stat_result) -> None:
    os.chmod(path, st.st_mode & 0o7777)
    if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
        os.chown(path, st.st_uid, st.st_gid)


def write_host_config(file: HostConfigFile, config: dict[str, Any]) -> Path:
    """Replace the file atomically (same mode and owner) after saving what it holds now as a
    new numbered backup; returns the backup's path."""
    target = file.path.resolve()  # a symlinked config (dotfiles) stays a symlink
    tmp = target.with_name(f".{target.name}.mtguard-tmp")
    try:
        text = planned_text(file, config)
        st = target.stat()
        backup = _create_backup(target, target.read_bytes(), st)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        _same_owner(tmp, st)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise HostConfigError(str(file.path), f"cannot write: {exc.strerror or exc}") from exc
    return backup


__all__ = ["HostConfigFile", "backups", "config_diff", "planned_text", "project_dir",
           "read_host_config", "render_config", "strip_jsonc", "write_host_config"]
