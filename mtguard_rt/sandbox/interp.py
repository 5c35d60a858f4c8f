"""Which programs the sandbox sees: the user's PATH and the interpreter the command needs.

Inside the default image, programs are the host's: /usr is mounted read-only, and `PATH` is
the user's own PATH (the proxy's environment) minus the directories the sandbox cannot see,
so `python3`, `node`, `npx`, `uvx` resolve as they do for the user, not to the guard's
Python. A command that runs from a Python virtual environment (its program, or the
interpreter on its script's `#!` line) also gets that environment's base installation
mounted, read-only: a venv is useless without it. An interpreter the server may run by name
for its user (`USER_INTERPRETERS`: `python`, `ruby`, ...) that the user's PATH has and the
sandbox's lacks (pyenv's `python` shim) gets its installation mounted read-only and its
directory appended to PATH. The guard's own environment is visible only when the server is
started with the guard's own Python (then it leads PATH, as before).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

STANDARD_PATH = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"]
SHEBANG_MAX = 256  # bytes of a script's first line read for its interpreter


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def host_path() -> list[str]:
    return [d for d in os.environ.get("PATH", "").split(":") if os.path.isabs(d)]


def guard_prefixes() -> list[str]:
    out = []
    for prefix in (sys.prefix, sys.base_prefix):
        if prefix and not prefix.startswith("/usr") and prefix not in out:
            out.append(prefix)
    return out


def programs_named(command: list[str]) -> list[str]:
    """The command's program and every argument naming an executable by absolute path (a
    launcher's target: `sh -c '...' /venv/bin/python app.py`, `env X=1 /venv/bin/tool`)."""
    named = [command[0]]
    for arg in command[1:]:
        if os.path.isabs(arg) and os.path.isfile(arg) and os.access(arg, os.X_OK):
            named.append(arg)
    return named


def is_guard_python(command: list[str]) -> bool:
    guard_bin = os.path.join(sys.prefix, "bin")
    return any(
        os.path.isabs(p) and os.path.dirname(os.path.abspath(p)) == guard_bin
        for p in programs_named(command)
    )


def venv_of(path: str) -> tuple[str, str | None] | None:
    """(venv root, base prefix) when `path` (unresolved) is in a venv's bin directory."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    cfg = Path(root, "pyvenv.cfg")
    if not cfg.is_file():
        return None
    for line in cfg.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return root, os.path.dirname(os.path.realpath(value.strip()))
    return root, None


def shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(SHEBANG_MAX)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return words[1] if not words[1].startswith("-") else None
    return words[0]


def which(program: str, dirs: list[str]) -> str | None:
    for d in dirs:
        candidate = os.path.join(d, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def interpreter_roots(command: list[str], dirs: list[str]) -> list[str]:
    """Directories to mount read-only so the command's own Python environment works."""
    candidates: list[str] = []
    for program in programs_named(command):
        path = program if "/" in program else which(program, dirs)
        if path is None:
            continue
        candidates.append(path)
        interp = shebang(os.path.realpath(path))
        if interp is not None:
            candidates.append(interp if "/" in interp else which(interp, dirs) or interp)
    roots: list[str] = []
    for candidate in candidates:
        found = venv_of(candidate) if os.path.isabs(candidate) else None
        if found is None:
            continue
        for root in found:
            if root and not root.startswith("/usr") and root not in roots:
                roots.append(root)
    return roots


# Interpreters a server may run by name on its user's behalf (a code runner's `python -u
# FILE`, a tool's `ruby x.rb`): when the user's PATH has one the sandbox's lacks, it is
# brought in (`user_interpreters`).
USER_INTERPRETERS = (
    "python", "python3", "node", "npx", "npm", "uv", "uvx", "ruby", "perl", "php", "deno", "bun",
)  # fmt: skip


def install_roots(program: str) -> list[str]:
    """`install_root`, plus a venv's base installation (a venv is useless without it)."""
    root = install_root(program)
    if root is None:
        return []
    venv = venv_of(program)
    base = venv[1] if venv is not None and venv[0] == root else None
    return [root, *([base] if base and not base.startswith("/usr") else [])]


def install_root(program: str) -> str | None:
    """The directory tree `program` (as found on PATH, unresolved) needs to run: a version
    manager's root for its shim (`<root>/shims/python`: pyenv, rbenv, nodenv, asdf run their
    own code and version files under that root), a venv's root, else the prefix of the real
    executable (`<prefix>/bin/node`). None for a prefix that is a home directory or `/`:
    a personal bin directory is not an installation to expose."""
    parent = os.path.dirname(os.path.abspath(program))
    if os.path.basename(parent) == "shims":
        root = os.path.dirname(parent)
    elif (venv := venv_of(program)) is not None:
        root = venv[0]
    else:
        real_dir = os.path.dirname(os.path.realpath(program))
        if os.path.basename(real_dir) != "bin":
            return None
        root = os.path.dirname(real_dir)
    homes = {os.path.expanduser("~"), "/root", "/home"}
    if root in ("/", "") or root in homes or os.path.dirname(root) == "/home":
        return None
    return root


def user_interpreters(sandbox_dirs: list[str], host_dirs: list[str]) -> list[tuple[str, str]]:
    """(installation root, PATH directory) of each `USER_INTERPRETERS` name the user's PATH
    resolves and the sandbox's PATH (`sandbox_dirs`, as they will be inside) does not. The
    directory goes at the end of the sandbox's PATH, so a name the sandbox already resolves
    keeps its program; the root is mounted read-only (plus a venv's base, as for the
    command's own interpreter)."""
    out: list[tuple[str, str]] = []
    for name in USER_INTERPRETERS:
        if which(name, sandbox_dirs) is not None:
            continue
        program = which(name, host_dirs)
        roots = install_roots(program) if program is not None else []
        if program is None or not roots or under(roots[0], ["/usr", *guard_prefixes()]):
            continue  # the guard's own environment stays out (see the module docstring)
        for root in roots:
            entry = (root, os.path.dirname(program))
            if entry not in out:
                out.append(entry)
        sandbox_dirs = [*sandbox_dirs, os.path.dirname(program)]
    return out


def sandbox_path(visible: list[str], guard: bool) -> list[str]:
    """The sandbox's PATH: the user's, keeping the directories visible inside."""
    out = [os.path.join(sys.prefix, "bin")] if guard else []
    for d in host_path():
        real = os.path.realpath(d)
        if d not in out and (under(real, ["/usr"]) or under(real, visible)):
            out.append(d)
    return out + [d for d in STANDARD_PATH if d not in out]


def user_shell(visible: list[str]) -> str:
    """The user's login shell ($SHELL), when the sandbox can run it; else /bin/sh."""
    shell = os.environ.get("SHELL", "")
    if shell and os.path.isabs(shell) and os.access(shell, os.X_OK):
        real = os.path.realpath(shell)
        if under(real, ["/usr", *visible]):
            return shell
    return "/bin/sh"
