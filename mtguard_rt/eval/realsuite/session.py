"""Benign real-server sessions as data: `load_sessions()` reads `sessions/<server>.toml`.

A session names a pinned registry server, the argv that starts it, a workspace fixture built
fresh for each run, and 5-15 calls of ordinary work for one task (format: docs/EVALUATION.md,
"Real-server suite"). Placeholders `{servers}`, `{ws}`, `{site}` and `{home}` are resolved per
run by `resolve()`; an unknown placeholder, an unknown key or a fixture path that leaves the
workspace is an error naming the file and line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import msgspec

from ...audit.loader import locate
from ...errors import GuardError

SESSIONS_DIR = Path(__file__).resolve().parent / "sessions"
PLACEHOLDERS = ("servers", "ws", "site", "home")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_WHERE = re.compile(r" - at `\$([^`]*)`")


class SessionError(GuardError):
    """A session file is missing or malformed (file and line)."""

    def __init__(self, path: str, line: int | None, why: str) -> None:
        self.path = path
        self.line = line
        self.why = why
        super().__init__(f"real-server session {path}{f':{line}' if line else ''}: {why}")


class Call(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    task: str | None = None  # else the session's
    expect_error: bool = False  # the real server's own answer is an error


class Fixture(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    files: dict[str, str] = msgspec.field(default_factory=dict)  # relative path -> text
    setup: list[list[str]] = msgspec.field(default_factory=list)  # argv on the host, cwd = ws


class Session(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    server: str
    package: str
    registry: Literal["pypi", "npm"]
    command: list[str]
    task: str
    calls: list[Call]
    network: Literal["none", "host"] = "none"
    env: dict[str, str] = msgspec.field(default_factory=dict)
    fixture: Fixture = msgspec.field(default_factory=Fixture)
    call_timeout_s: float = 60.0
    # uid owning the workspace in the guarded run (None: the sandbox's default user; 0: a
    # project owned by root; another uid: a project of another user). Unguarded, the files
    # belong to the user running the suite, as they would to a user running the server.
    owner: int | None = None
    # "held-out": run once before anyone tuned the guard for it (docs/EVALUATION.md); the
    # first-run figures of these sessions are the independent measure of precision.
    set: Literal["core", "held-out"] = "core"
    allow_domains: list[str] = msgspec.field(default_factory=list)  # --allow-domain, guarded
    path: str = ""  # the file it was read from (set by the loader, not in the file)


def resolve(value: Any, values: Mapping[str, str]) -> Any:
    """`value` (str, list, dict, nested) with every `{name}` placeholder replaced."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [resolve(v, values) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, values) for k, v in value.items()}
    return value


def placeholders(value: Any) -> set[str]:
    """Every `{name}` used anywhere in `value`."""
    if isinstance(value, str):
        return set(_PLACEHOLDER.findall(value))
    if isinstance(value, list):
        return set().union(*(placeholders(v) for v in value)) if value else set()
    if isinstance(value, dict):
        return placeholders(list(value.values()))
    return set()


def load_session(path: Path | str) -> Session:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SessionError(str(path), None, f"cannot read: {exc}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise SessionError(str(path), int(m.group(1)) if m else None, str(exc)) from exc
    try:
        session = msgspec.convert(raw, Session)
    except msgspec.ValidationError as exc:
        raise SessionError(str(path), locate(text, _where(str(exc))), str(exc)) from exc
    for where, why in _problems(session, path):
        raise SessionError(str(path), locate(text, where), why)
    session.path = str(path)
    return session


def load_sessions(
    names: Sequence[str] | None = None, directory: Path | str | None = None,
    sets: Sequence[str] | None = None,
) -> list[Session]:
    """The sessions in `directory` (default: the shipped ones), only `names` if given, only
    those of `sets` ("core", "held-out") if given."""
    folder = Path(directory) if directory else SESSIONS_DIR
    files = sorted(folder.glob("*.toml"))
    if not files:
        raise SessionError(str(folder), None, "no session files (*.toml)")
    if names:
        known = {f.stem: f for f in files}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SessionError(
                str(folder), None,
                f"no session for {', '.join(unknown)} (known: {', '.join(sorted(known))})",
            )
        files = [known[n] for n in dict.fromkeys(names)]
    sessions = [load_session(f) for f in files]
    return [s for s in sessions if not sets or s.set in sets]


def _where(msg: str) -> tuple[str | int, ...]:
    m = _WHERE.search(msg)
    parts: list[str | int] = []
    if m:
        for name, idx in re.findall(r"\.([^.\[]+)|\[(\d+)\]", m.group(1)):
            parts.append(int(idx) if idx else name)
    unknown = re.match(r"Object contains unknown field `([^`]+)`", msg)
    if unknown:
        parts.append(unknown.group(1))
    return tuple(parts)


def _problems(s: Session, path: Path) -> list[tuple[tuple[str | int, ...], str]]:
    found: list[tuple[tuple[str | int, ...], str]] = []
    if s.server != path.stem:
        found.append((("server",), f"server {s.server!r} must match the file name {path.stem!r}"))
    if s.owner is not None and not 0 <= s.owner < 2**32 - 1:
        found.append((("owner",), f"owner {s.owner} is not a uid"))
    if not s.command:
        found.append((("command",), "command is empty"))
    if not s.calls:
        found.append((("calls",), "a session needs at least one call"))
    for key in ("command", "task", "env", "fixture", "calls"):
        bad = placeholders(msgspec.to_builtins(getattr(s, key))) - set(PLACEHOLDERS)
        if bad:
            found.append(((key,), f"unknown placeholder(s) {sorted(bad)}; known: {PLACEHOLDERS}"))
    if "site" in placeholders(msgspec.to_builtins(s)) and s.network != "host":
        found.append((("network",), 'a session using {site} needs network = "host"'))
    for rel in s.fixture.files:
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            found.append((("fixture", "files"), f"fixture file {rel!r} must stay in the workspace"))
    return found
