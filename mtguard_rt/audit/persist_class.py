"""Persistence by class: what makes a file run later, one table, with the reason per entry.

`persist_class(path)` names the class of an absolute path (None: not a persistence file)
beside the policy's own `persistence_paths` (which the user may extend). A class says where
such files live (`~/` any home, `**/` anywhere: a workspace entry is listed only where a tool
runs it later: repo hooks, build files, IDE tasks, .envrc), why they run later, which task
words ask for one, and how its content is judged (`Judge`):
- "lines": every line a call adds runs (shell start-up, a PATH shim, a `.pth`, a hook, a
  registry setting): each must be asked for;
- "desktop": a desktop entry runs its `Exec=` command: the task must name its program;
- "git-config", "build-json", "makefile", "ide-tasks": most of the file is inert data; only
  the entries that run a command (`core.pager`, an `!alias`, a `postinstall` script, a
  recipe line, an editor task's command and when it runs) are;
- "bytecode": a `.pyc` runs in place of its source; the interpreter writes its own cache by
  an atomic rename, so a `.pyc` opened for writing, or renamed there by another program, was
  planted.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from .patterns import PathSet

Judge = Literal["lines", "desktop", "git-config", "build-json", "makefile", "ide-tasks", "bytecode"]
PLACE_GATED: frozenset[Judge] = frozenset({"lines", "desktop"})  # any unasked write runs


@dataclass(frozen=True, slots=True)
class PersistClass:
    kind: str  # "a PATH shim": how evidence and consent lines name it
    why: str  # what makes it run later
    globs: tuple[str, ...]
    words: frozenset[str]  # task words that ask for this kind of change
    judge: Judge
    paths: PathSet

    @property
    def place_gated(self) -> bool:
        """Does any write the task does not ask for run later (no inert content)?"""
        return self.judge in PLACE_GATED


def _entry(kind: str, why: str, globs: str, words: str, judge: Judge) -> PersistClass:
    g = tuple(globs.split())
    return PersistClass(kind, why, g, frozenset(words.split()), judge, PathSet(g))


# Order matters: the first class a path matches is its class.
CLASSES: tuple[PersistClass, ...] = (
    _entry(
        "a shell setting",
        "the user's shell runs it at start-up",
        "~/.bashrc ~/.bash_profile ~/.bash_login ~/.bash_logout ~/.profile ~/.zshrc "
        "~/.zprofile ~/.zshenv ~/.zlogin ~/.config/fish/config.fish ~/.config/fish/conf.d/*",
        "alias aliases shell bashrc zshrc profile bash zsh fish prompt",
        "lines",
    ),
    _entry(
        "a systemd unit",
        "systemd starts it (a timer, a service, at login)",
        "~/.config/systemd/** ~/.local/share/systemd/**",
        "timer timers systemd service unit units",
        "lines",
    ),
    _entry(
        "a scheduled job",
        "cron or launchd runs it on a schedule or at login",
        "/var/spool/cron/** ~/Library/LaunchAgents/**",
        "cron crontab schedule scheduled launchd agent",
        "lines",
    ),
    _entry(
        "an autostart entry",
        "the desktop session runs its Exec= command at login",
        "~/.config/autostart/**",
        "autostart login startup logon",
        "desktop",
    ),
    _entry(
        "an SSH key",
        "it lets its holder log in",
        "~/.ssh/authorized_keys ~/.ssh/authorized_keys2",
        "ssh authorized",
        "lines",
    ),
    _entry(
        "a PATH shim",
        "a program here shadows the one the user's shell finds on PATH",
        "~/.local/bin/* ~/bin/*",
        "install bin path shim wrapper script command",
        "lines",
    ),
    _entry(
        "an interpreter start-up hook",
        "Python runs it at every interpreter start",
        "~/.local/lib/python*/site-packages/*.pth **/site-packages/sitecustomize.py "
        "**/site-packages/usercustomize.py **/dist-packages/sitecustomize.py "
        "**/dist-packages/usercustomize.py",
        "pth sitecustomize usercustomize site startup hook",
        "lines",
    ),
    _entry(
        "a git setting",
        "git runs its commands (pager, editor, hooksPath, !aliases, filters)",
        "~/.gitconfig ~/.config/git/config **/.git/config",
        "git gitconfig config alias aliases pager editor hookspath credential",
        "git-config",
    ),
    _entry(
        "a git hook",
        "git runs it on commit, merge, checkout or push",
        "**/.git/hooks/* ~/.config/git/hooks/*",
        "hook hooks",
        "lines",
    ),
    _entry(
        "a package-manager setting",
        "the next install fetches from the registry or runs the script it names",
        "~/.npmrc **/.npmrc ~/.yarnrc ~/.yarnrc.yml **/.yarnrc **/.yarnrc.yml "
        "~/.config/pip/pip.conf ~/.pip/pip.conf /etc/pip.conf ~/.pydistutils.cfg "
        "~/.config/uv/uv.toml ~/.cargo/config ~/.cargo/config.toml **/.cargo/config.toml "
        "~/.bunfig.toml ~/.gemrc",
        "registry npmrc yarnrc pip index mirror cargo npm yarn proxy",
        "lines",
    ),
    _entry(
        "a build script",
        "npm runs its lifecycle scripts on install and its scripts by name",
        "**/package.json",
        "script scripts",
        "build-json",
    ),
    _entry(
        "a build recipe",
        "make runs its recipes",
        "**/Makefile **/makefile **/GNUmakefile",
        "makefile make target recipe",
        "makefile",
    ),
    _entry(
        "an IDE task",
        "the IDE runs it (a task on folder open, a run configuration)",
        "**/.vscode/tasks.json",
        "task tasks vscode ide launch configuration",
        "ide-tasks",
    ),
    _entry(
        "an IDE task",
        "the IDE runs it (a task on folder open, a run configuration)",
        "**/.vscode/launch.json **/.idea/runConfigurations/*",
        "task tasks vscode ide launch configuration",
        "lines",
    ),
    _entry(
        "a directory environment",
        "direnv runs it on entering the directory",
        "**/.envrc",
        "envrc direnv",
        "lines",
    ),
    _entry(
        "Python bytecode",
        "Python runs a .pyc in place of (or without) its source",
        "**/*.pyc",
        "",
        "bytecode",
    ),
)
_ALL = PathSet([g for c in CLASSES for g in c.globs])
_SAMPLE = re.compile(r"\.sample$")  # git's own hook templates: inert
_INTERPRETER = re.compile(r"^(?:python|pypy)[\d.]*$")


@functools.lru_cache(maxsize=8192)  # a pure function of the path, asked per path per call
def persist_class(path: str) -> PersistClass | None:
    """The persistence class of an absolute path, or None."""
    if not path.startswith("/") or not _ALL.matches(path) or _SAMPLE.search(path):
        return None
    parts = path.split("/")
    return next((c for c in CLASSES if c.paths.matches(path, parts)), None)


def interpreter_cache_write(op: str, exe: str) -> bool:
    """Did the interpreter write this `.pyc` as it writes its own cache (an atomic rename
    by a Python process)?"""
    return op == "rename" and bool(_INTERPRETER.match(os.path.basename(exe)))


def home_files(home: str) -> list[str]:
    """The exact home files of classes whose every unasked write runs (kill on write)."""
    out: list[str] = []
    for c in CLASSES:
        if c.place_gated:
            out += [
                home.rstrip("/") + g[1:]
                for g in c.globs
                if g.startswith("~/") and not any(ch in g for ch in "*?[{")
            ]
    return out


# --- what, in a file of a content-judged class, runs later ---------------------------------

# git keys whose value is a command git runs, or where it finds commands or hooks
_GIT_EXEC = re.compile(
    r"^(?:core\.(?:pager|editor|hookspath|sshcommand|fsmonitor|askpass|gitproxy)|"
    r"sequence\.editor|credential(?:\..*)?\.helper|alias\..*|pager\..*|"
    r"(?:filter|diff|merge)\..*\.(?:clean|smudge|process|textconv|command|driver)|"
    r"gpg(?:\..*)?\.program|include\.path|includeif\..*\.path|url\..*\.insteadof|"
    r"remote\..*\.(?:uploadpack|receivepack|proxy)|http\..*proxy|web\.browser|"
    r"instaweb\.httpd|interactive\.difffilter)$"
)
_SECTION = re.compile(r'^\[\s*([\w.-]+)(?:\s+"([^"]*)")?\s*\]\s*(.*)$')
_KEYVAL = re.compile(r"^([\w.-]+)\s*(?:=\s*(.*))?$")


def git_settings(text: str | None) -> set[tuple[str, str]]:
    """(key, value) of every setting in a git config file (`section.sub.key`, lower-case
    but for the subsection)."""
    out: set[tuple[str, str]] = set()
    section = ""
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m:
            name, sub, rest = m.groups()
            section = name.lower() + (f".{sub}" if sub is not None else "")
            line = rest.strip()
            if not line:
                continue
        kv = _KEYVAL.match(line)
        if kv and section:
            out.add((f"{section}.{kv.group(1).lower()}", (kv.group(2) or "").strip()))
    return out


def git_exec_settings(before: str | None, after: str | None) -> list[str]:
    """The command-running settings `after` has beyond `before`, as `key = value` lines."""
    new = git_settings(after) - git_settings(before)
    return [f"{k} = {v}" for k, v in sorted(new) if _GIT_EXEC.match(k.lower())]


_HOOK_KEYS = ("scripts",)
_HOOK_TOOLS = ("husky", "simple-git-hooks", "pre-commit")  # tools that install git hooks


def _package_scripts(text: str | None) -> dict[str, str]:
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {}  # npm refuses a package.json it cannot parse: nothing of it runs
    if not isinstance(doc, dict):
        return {}
    out: dict[str, str] = {}
    for key in _HOOK_KEYS:
        for name, cmd in (doc.get(key) or {}).items() if isinstance(doc.get(key), dict) else ():
            out[str(name)] = str(cmd)
    for key in _HOOK_TOOLS:
        value = doc.get(key)
        if isinstance(value, dict):
            hooks = value.get("hooks", value)
            if isinstance(hooks, dict):
                out.update((f"{key} {n}", str(c)) for n, c in hooks.items())
        elif value is not None:
            out[key] = json.dumps(value)
    return out


def package_scripts(before: str | None, after: str | None) -> list[str]:
    """The scripts `after` adds or changes (`postinstall: <command>`): what npm, or a
    hook installer, runs that it did not before. A dependency added is not one."""
    old, new = _package_scripts(before), _package_scripts(after)
    return [f"{k}: {v}" for k, v in new.items() if old.get(k) != v]


def make_recipes(before: str | None, after: str | None) -> list[str]:
    """The recipe lines (tab-indented: what make runs) `after` adds beyond `before`."""

    def recipes(text: str | None) -> list[str]:
        return [ln.strip() for ln in (text or "").splitlines() if ln.startswith("\t")]

    old = recipes(before)
    out: list[str] = []
    for line in recipes(after):
        if line in old:
            old.remove(line)
        elif line and not line.startswith("#"):
            out.append(line)
    return out


def added_lines(before: str | None, after: str | None) -> list[str]:
    """The lines `after` holds beyond those of `before` (as a multiset; blank and comment
    lines carry nothing to run). None: the file is not there."""
    old = Counter(line.strip() for line in (before or "").splitlines())
    out: list[str] = []
    for line in (after or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if old[line] > 0:
            old[line] -= 1
        else:
            out.append(line)
    return out


# the keys of an editor task that only name, group or display it (everything else runs or
# says when and how it runs: command, args, options, dependsOn, runOptions, os overrides)
_TASK_LABELS = frozenset(
    "label type group presentation problemMatcher detail icon hide isBackground".split()
)


def _ide_tasks(text: str | None) -> list[dict[str, object]] | None:
    """The tasks of a .vscode/tasks.json, or None when it does not parse as JSON (the
    editor also reads comments and trailing commas: then every added line is judged)."""
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return None
    tasks = doc.get("tasks") if isinstance(doc, dict) else None
    return [t for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []


def _flat(value: object) -> list[str]:
    if isinstance(value, dict):
        return [f"{k} {v}" for k, x in value.items() for v in _flat(x)]
    if isinstance(value, list):
        return [v for x in value for v in _flat(x)]
    return [str(value)]


def ide_tasks(before: str | None, after: str | None) -> list[str]:
    """The editor tasks `after` adds or changes, as `label: what it runs` (its command,
    arguments, options and when it runs: `runOn folderOpen`); a tasks file that does not
    parse: its added lines."""
    old, new = _ide_tasks(before), _ide_tasks(after)
    if new is None:
        return added_lines(before, after)
    out: list[str] = []
    for t in new:
        if old is not None and t in old:
            continue
        runs = [" ".join(_flat(t[k])) for k in ("command", "args") if k in t]
        runs += [f"{k} {v}" for k, x in t.items() if k not in _TASK_LABELS | {"command", "args"}
                 for v in _flat(x)]  # fmt: skip
        out.append(f"{t.get('label', '')}: {' '.join(runs)}".strip())
    return out


def running_additions(c: PersistClass, before: str | None, after: str | None) -> list[str]:
    """What a content-judged class's file runs later that it did not before."""
    if c.judge == "git-config":
        return git_exec_settings(before, after)
    if c.judge == "build-json":
        return package_scripts(before, after)
    if c.judge == "makefile":
        return make_recipes(before, after)
    if c.judge == "ide-tasks":
        return ide_tasks(before, after)
    raise ValueError(f"{c.kind} is judged by its lines")
