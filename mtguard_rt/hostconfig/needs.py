"""What a wrapped stdio server needs from its sandbox, read off its host config entry.

A server that runs on the host sees the whole file system and the network; in the sandbox
it sees the host's `/usr`, a synthesized home, and only what `--workspace` (read-write) and
`--mount` (read-only) add, with no network. `infer_needs` looks at the entry the way the
host will run it and proposes the flags, each with the reason, for the user to review:

- existing directory arguments (`/srv/docs`, `--repository=/repo`, `.` resolved against the
  directory the host starts the server in): the first is the workspace, the others mounts;
- where the server is installed, when that is outside `/usr`: the `node_modules` holding an
  absolute script, a virtualenv (and the interpreter it was made from), a `bin` directory's
  prefix, a script's project directory;
- the network a package runner needs (`npx`, `uvx`... fetch the package from its registry
  at every start) and the hosts of URL arguments.

Nothing here decides: nothing is emitted that the proxy would refuse, and a need the proxy
cannot express (network without `--allow-domain`) becomes a note.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

NPM_REGISTRY = ("registry.npmjs.org",)
PYPI = ("pypi.org", "files.pythonhosted.org")
# Package runners: (program, subcommand words) -> the registry they download from.
RUNNERS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("npx",): NPM_REGISTRY, ("bunx",): NPM_REGISTRY, ("npm", "exec"): NPM_REGISTRY,
    ("pnpm", "dlx"): NPM_REGISTRY, ("yarn", "dlx"): NPM_REGISTRY,
    ("uvx",): PYPI, ("uv", "tool", "run"): PYPI, ("pipx", "run"): PYPI,
}
# Directories the sandbox already has (runtime mounts), or must never get whole.
PROVIDED = ("/usr", "/bin", "/sbin", "/lib", "/lib64")
SYSTEM = ("/", "/etc", "/proc", "/sys", "/dev", "/boot", "/var", "/run", "/root", "/home",
          "/tmp", "/opt", "/srv", "/mnt", "/media")
PROJECT_MARKERS = ("package.json", "pyproject.toml", "setup.py", "setup.cfg")
VENV = "the virtualenv it is installed in"
PROJECT = "the project it belongs to"
BESIDE = "the directory it is in"
WEAK = (PROJECT, BESIDE)
_VAR = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")  # ${X:-default}


@dataclass
class Need:
    """Proxy flags for one thing the server needs, and why they were inferred."""

    flags: list[str]
    reason: str


@dataclass
class Needs:
    workspace: str | None = None
    mounts: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    found: list[Need] = field(default_factory=list)  # in the order the flags are emitted
    notes: list[str] = field(default_factory=list)  # what the user should check by hand

    def flags(self) -> list[str]:
        return [flag for need in self.found for flag in need.flags]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def too_broad(path: str, home: str) -> bool:
    """A directory that must not be mounted whole: a system root, the home directory (or
    one of its ancestors), or a home directory's dot-directory of shared state."""
    p = os.path.normpath(path)
    if _holds_home_or_system(p, home):
        return True
    parent = os.path.dirname(p)
    return parent == os.path.normpath(home) and os.path.basename(p).startswith(".")


def _holds_home_or_system(p: str, home: str) -> bool:
    return p in SYSTEM or _under(home, [p])


def install_dirs(path: str, home: str) -> list[tuple[str, str]]:
    """Directories (and why) a program or script at `path` needs to run: what holds its
    code and dependencies. Both the name and its target when `path` is a symlink."""
    out: list[tuple[str, str]] = []
    for p in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
        if _under(p, PROVIDED):
            continue
        found = _install_dir(p, home)
        if found and found[0] not in [d for d, _ in out]:
            out.append(found)
    return out


def _install_dir(p: str, home: str) -> tuple[str, str] | None:
    parts = Path(p).parts
    if "node_modules" in parts:  # Node resolves dependencies up to the topmost node_modules
        top = str(Path(*parts[: parts.index("node_modules") + 1]))
        return top, "the node_modules it is installed in"
    for up in list(Path(p).parents)[:4]:
        # a virtualenv holds only itself, even as a dot-directory of the home (~/.venv)
        if (up / "pyvenv.cfg").is_file() and not _holds_home_or_system(str(up), home):
            return str(up), VENV
    m = re.search(r"^(.*)/lib/python3[^/]*/(site|dist)-packages/", p)
    if m and not too_broad(m.group(1), home):
        return m.group(1), "the Python prefix it is installed in"
    parent = os.path.dirname(p)
    if os.path.basename(parent) == "bin" and not too_broad(os.path.dirname(parent), home):
        return os.path.dirname(parent), "the prefix of its bin directory"
    for up in [Path(parent), *Path(parent).parents][:4]:
        if too_broad(str(up), home):
            break
        if any((up / m).is_file() for m in PROJECT_MARKERS):
            return str(up), PROJECT
    if not too_broad(parent, home):
        return parent, BESIDE
    return None


def venv_base(venv: str) -> str | None:
    """The prefix of the interpreter a virtualenv was made from (`home =` in pyvenv.cfg)."""
    try:
        text = Path(venv, "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r"^home\s*=\s*(.+?)\s*$", text, re.M)
    return os.path.dirname(m.group(1).rstrip("/")) if m else None


def runner_registry(command: str, args: Sequence[str]) -> tuple[str, ...] | None:
    words = [os.path.basename(command), *args]
    for prefix, registry in RUNNERS.items():
        if tuple(words[: len(prefix)]) == prefix:
            return registry
    return None


@dataclass
class _Context:
    base: str | None  # where the host starts the server (relative paths resolve here)
    home: str
    environ: Mapping[str, str]

    def expand(self, text: str) -> str | None:
        """`text` with the host's variables and `~` expanded; None when one is unknown."""
        unknown = False

        def sub(m: re.Match[str]) -> str:
            nonlocal unknown
            value = self.environ.get(m.group(1), m.group(2))
            unknown = unknown or value is None
            return value or ""

        text = text.replace("${workspaceFolder}", self.base or "\0")
        text = text.replace("${userHome}", self.home)
        if text == "~" or text.startswith("~/"):
            text = self.home + text[1:]
        text = _VAR.sub(sub, text)
        return None if unknown or "\0" in text else text

    def path(self, text: str) -> str | None:
        """The absolute path an argument names, if it looks like a path at all."""
        value = self.expand(text)
        if not value or "://" in value:
            return None
        if os.path.isabs(value):
            return os.path.normpath(value)
        if self.base and (value in (".", "..") or value.startswith(("./", "../"))
                          or ("/" in value and not value.startswith("@"))):
            return os.path.normpath(os.path.join(self.base, value))
        return None


def infer_needs(
    entry: Mapping[str, Any], *, base: str | None = None, home: str | None = None,
    environ: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> Needs:
    """The sandbox flags `entry` (a stdio server) needs, each with its reason.

    `base`: the directory the host starts the server in, when the config says (a project's
    config file, the entry's `cwd`); relative path arguments resolve against it.
    """
    env = dict(os.environ if environ is None else environ)
    home = os.path.normpath(home or env.get("HOME") or os.path.expanduser("~"))
    ctx = _Context(base, home, env)
    cwd = entry.get("cwd")
    if isinstance(cwd, str):
        ctx.base = ctx.path(cwd) if ctx.expand(cwd) else None
    command = str(entry["command"])
    args = [a for a in entry.get("args", []) if isinstance(a, str)]
    raw_env = entry.get("env")
    entry_env: Mapping[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    needs = Needs()
    _directories(needs, ctx, args, entry_env)
    _installation(needs, ctx, command, args, which)
    _network(needs, ctx, command, args, entry_env)
    return needs


def _arg_values(args: Sequence[str]) -> list[str]:
    """Arguments, with the value of `--opt=value` forms split off."""
    return [a.partition("=")[2] if a.startswith("-") and "=" in a else a for a in args]


def _directories(needs: Needs, ctx: _Context, args: Sequence[str], env: Mapping[str, Any]
                 ) -> None:
    values = [*_arg_values(args), *(v for v in env.values() if isinstance(v, str))]
    relative = False  # an existing path named relative to where the host starts the server
    for value in values:
        expanded = ctx.expand(value) or ""
        path = ctx.path(value)
        if path is None:
            if expanded.startswith(("./", "../")) or expanded == ".":
                needs.notes.append(f"{value!r} is relative to the host's working directory, "
                                   "which this config does not say: write an absolute path")
            continue
        is_relative = not os.path.isabs(expanded)
        if not os.path.isdir(path):
            if not os.path.exists(path) and not is_relative:
                needs.notes.append(f"{path} does not exist here: nothing mounted for it")
            relative = relative or (is_relative and os.path.exists(path))
            continue
        relative = relative or is_relative
        if path in SYSTEM or path == ctx.home:
            needs.notes.append(f"{path} is an argument but is not mounted: give the server "
                               "a project directory, not a system or home directory")
        elif needs.workspace is None:
            needs.workspace = path
            needs.found.append(Need(["--workspace", path], "first directory argument "
                                    "(read-write in the sandbox)"))
        elif not _under(path, [needs.workspace, *needs.mounts]):
            needs.mounts.append(path)
            needs.found.append(Need(["--mount", path], "directory argument (read-only in "
                                    "the sandbox: only the workspace is writable)"))
    if not relative or ctx.base is None or needs.workspace == ctx.base:
        return
    if needs.workspace is None and not too_broad(ctx.base, ctx.home):
        # The sandbox starts the server in its workspace: relative paths must resolve there.
        needs.workspace = ctx.base
        needs.found.append(Need(["--workspace", ctx.base], "the directory the host starts "
                                "the server in (its relative paths resolve there)"))
    else:
        needs.notes.append(f"relative paths resolve in {needs.workspace or 'the sandbox home'}"
                           f" in the sandbox, not in {ctx.base}: write absolute paths")


def _installation(needs: Needs, ctx: _Context, command: str, args: Sequence[str],
                  which: Callable[[str], str | None]) -> None:
    program = ctx.path(command) if "/" in command else which(command)
    if program is None or not os.path.exists(program):
        needs.notes.append(f"{command!r} is not found here: the host may run another one")
    searched = program is not None and "/" not in command  # found on this shell's PATH
    candidates = [program] if program else []
    candidates += [p for p in map(ctx.path, _arg_values(args)) if p and os.path.isfile(p)]
    for i, path in enumerate(candidates):
        dirs = install_dirs(path, ctx.home)
        if i == 0 and searched:  # a launcher (pyenv shim, ~/.local/bin): only a real install
            dirs = [(d, why) for d, why in dirs if why not in WEAK]
        for directory, why in list(dirs):
            base = venv_base(directory) if why == VENV else None
            if base and not _under(base, PROVIDED) and not too_broad(base, ctx.home):
                dirs.append((base, "the Python the virtualenv was made from"))
        for directory, why in dirs:
            if _under(directory, [*([needs.workspace] if needs.workspace else []),
                                  *needs.mounts]):
                continue
            needs.mounts.append(directory)
            needs.found.append(Need(["--mount", directory],
                                    f"{why} ({os.path.basename(path)}, read-only)"))
    if program and "/" not in command and not _under(os.path.realpath(program), PROVIDED):
        needs.notes.append(f"{command!r} is {program} here, outside /usr: the sandbox finds it "
                           "only in a mounted directory; name it by its absolute path if the "
                           "server does not start")


def _network(needs: Needs, ctx: _Context, command: str, args: Sequence[str],
             env: Mapping[str, Any]) -> None:
    registry = runner_registry(command, args)
    if registry:
        runner = os.path.basename(command)
        needs.notes.append(f"{runner} fetches the server from {', '.join(registry)} at every "
                           "start; installed once and named by its path, it needs no network")
        needs.domains += registry
    for value in [*_arg_values(args), *(v for v in env.values() if isinstance(v, str))]:
        expanded = ctx.expand(value) or ""
        if re.match(r"https?://", expanded):
            host = urlsplit(expanded).hostname
            if host and host not in needs.domains:
                needs.domains.append(host)
    if needs.domains:
        needs.found.append(Need([f for d in needs.domains for f in ("--allow-domain", d)],
                                "hosts it must reach"))


def without_network_flags(needs: Needs) -> Needs:
    """`needs` for a proxy without `--allow-domain`: the hosts become a note."""
    kept = [n for n in needs.found if "--allow-domain" not in n.flags]
    notes = list(needs.notes)
    if needs.domains:
        notes.append(f"it needs the network ({', '.join(needs.domains)}) and the sandbox has "
                     "none; this mtguard cannot allow single hosts (--proxy-arg=--network=host "
                     "allows every host)")
    return Needs(needs.workspace, needs.mounts, needs.domains, kept, notes)


__all__ = ["Need", "Needs", "infer_needs", "install_dirs", "runner_registry", "too_broad",
           "without_network_flags"]
