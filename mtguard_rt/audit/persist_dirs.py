"""The persistence class's directories in the sandbox home, as the kernel refuses them.

`kernel_write_dirs(home)` turns the class table's home globs whose every unasked write runs
later (`PersistClass.place_gated`: a PATH dir `~/.local/bin/*`, `~/.config/systemd/**`,
autostart, fish `conf.d`, git's global hooks, user site-packages `*.pth`) into directory
prefixes (ending in '/') -> ACT_* bits: the kernel kills a writing open, a rename, link or
symlink onto a name under one (bpf/monitor.bpf.c `kill_in_pdir`) unless the call may write
there. `may_write_under(consent, directory)` decides that before dispatch, as
`WriteConsent.may_write` does for one file: for some file under the directory that the
arguments or the task name, or for the directory's kind (the task asks for a PATH shim).
What was written is judged after the call, by content (`persistence-write`).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

from .consent import WriteConsent
from .patterns import HOME_RE
from .persist_class import CLASSES

# ACT_* bits as monitor/kinds.py defines them (audit does not import the monitor)
ACT_KILL_WRITE = 16
ACT_ONE_LEVEL = 32
ACT_PTH = 64
# `python*` in a home glob: the interpreters a sandbox may run (user site-packages per version)
PYTHON_VERSIONS = ("python2.7", *(f"python3.{n}" for n in range(6, 16)))
_USER_SITE_HOOKS = ("sitecustomize.py", "usercustomize.py")
_MENTION = re.compile(r"(?:~|\$HOME|\$\{HOME\}|/)[^\s\"'`;|&<>(){}]*")


def _dirs_of(glob: str) -> list[tuple[str, int]]:
    """A home glob's directory prefixes (relative to ~, with '/') and their narrowing bits:
    `d/*` one level, `d/**` any depth, `d/*.pth` one level of .pth names; `python*` in
    the directory expanded per version. Other shapes: none (left to the online rule)."""
    head, _, leaf = glob[2:].rpartition("/")
    if leaf == "**":
        bits = 0
    elif leaf == "*":
        bits = ACT_ONE_LEVEL
    elif leaf == "*.pth":
        bits = ACT_ONE_LEVEL | ACT_PTH
    else:
        return []
    if "**" in head or any(c in head for c in "?[{"):
        return []
    heads = [head]
    if "*" in head:
        parts = head.split("/")
        if sum("*" in p for p in parts) != 1 or "python*" not in parts:
            return []
        at = parts.index("python*")
        heads = ["/".join([*parts[:at], v, *parts[at + 1 :]]) for v in PYTHON_VERSIONS]
    return [(h + "/", bits) for h in heads]


def kernel_write_dirs(home: str) -> dict[str, int]:
    """The persistence directories of the sandbox `home` -> ACT_* bits (kill on write)."""
    return dict(_write_dirs(home))


@lru_cache(maxsize=16)
def _write_dirs(home: str) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    base = home.rstrip("/") + "/"
    for c in CLASSES:
        if not c.place_gated:
            continue
        for glob in c.globs:
            if glob.startswith("~/"):
                for rel, bits in _dirs_of(glob):
                    out[base + rel] = out.get(base + rel, 0) | ACT_KILL_WRITE | bits
    return tuple(out.items())


def kernel_write_files(home: str) -> list[str]:
    """Exact interpreter start-up hooks of the user site directories (`**/site-packages/
    sitecustomize.py` under the home): killed on write like the exact persistence files."""
    base = home.rstrip("/")
    return [
        f"{base}/.local/lib/{v}/site-packages/{name}"
        for v in PYTHON_VERSIONS
        for name in _USER_SITE_HOOKS
    ]


def named_under(texts: list[str], directory: str, home: str) -> list[str]:
    """The absolute paths under `directory` the texts spell (absolute, `~/`, `$HOME/`)."""
    out: dict[str, None] = {}
    for text in texts:
        for tok in _MENTION.findall(text):
            path = re.sub(r"^(?:~|\$HOME|\$\{HOME\})(?=/)", home.rstrip("/"), tok)
            if not path.startswith("/"):
                continue
            path = os.path.normpath(path)
            if path.startswith(directory) and len(path) > len(directory):
                out[path] = None
    return list(out)


def may_write_under(consent: WriteConsent, directory: str) -> bool:
    """May this call write under the persistence `directory` (before the call)? Some file
    under it that an argument or the task names may be written (`may_write`), or the task
    asks for the directory's kind and no argument writes a line it does not ask for."""
    m = re.match(HOME_RE, directory)
    if m is None:
        return False
    home = m.group(0)
    bits = kernel_write_dirs(home).get(directory, 0)
    ctx = consent.ctx
    texts = [*ctx.arg_texts, *([ctx.task_text] if ctx.task_text else [])]
    candidates = named_under(texts, directory, home)
    candidates.append(directory + ("_.pth" if bits & ACT_PTH else "_"))  # the kind, unnamed
    return any(consent.may_write(p) for p in candidates)
