"""Which programs the sandbox sees: the user's PATH and the interpreter the command needs.

Inside the default image, programs are the host's: /usr is mounted read-only, and `PATH` is
the user's own PATH (the proxy's environment) minus the directories the sandbox cannot see,
so `python3`, `node`, `npx`, `uvx` resolve as they do for the user, not to the guard's
Python. A command that runs from a Python virtual environment (its program, or the
interpreter on its script's `#!` line) also gets that environment's base installation
mounted, read-only: a venv is useless without it. The guard's own environment is visible
only when the server is started with the guard's own Python (then it leads PATH, as before).
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
