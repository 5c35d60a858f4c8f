"""Unasked reads of mounted data that reach the result (`scope-escape`, rules_scope.py).

A sandboxed server sees host data only through what it was shown: its workspace, the roots
its command line or environment names, and other read-only mounts (`ServerScope.data_mounts`:
not its code). A file it reads on such a mount, outside the call's scope, is an escape when
its content reaches the result the agent reads and nothing explains the read: no argument
names it (a path that reaches it, its last steps, its name without the extension), the task
does not name it (its path, or every word of its name: "the SDK key" for sdk.key), nor does
the tool's name (`sdk_key`), and it is not named after the server itself (its own
configuration). A read whose content stays inside the server is left to the other rules.
Evidence names the file and which line reached the result, never the content.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Iterable

from .names import words_of
from .scope import ArgPath, under
from .secrets import name_words

MIN_LINE = 12  # characters of a file's line that must reach the result to count as disclosed
MIN_SHORT, MIN_SHORT_LINES = 6, 2  # or this many shorter lines of at least this many
MAX_READ = 64 * 1024  # bytes of a file read on the host when the sandbox's copy is not at hand
MAX_HOST_READS = 4  # files read on the host per call
MIN_NAME_WORD = 3  # letters of a file name's word that the task or the tool must say
_ALNUM = re.compile(r"[^\W_]", re.UNICODE)


def on_mount(path: str, mounts: Iterable[str]) -> str | None:
    """The data mount `path` lies on, else None."""
    return next((m for m in mounts if under(path, m)), None)


def host_content(path: str, mount: str) -> str | None:
    """`path` as the host holds it (a bind mount: the same path inside and out), read only
    when its real path stays on the mount's real path; None: unreadable or not text."""
    real = os.path.realpath(path)
    if not under(real, os.path.realpath(mount)):
        return None
    try:
        with open(real, "rb") as f:
            data = f.read(MAX_READ)
    except OSError:
        return None
    text = data.decode("utf-8", "replace")
    return None if "\x00" in text else text


def disclosed_line(content: str, result: str) -> int | None:
    """The number (from 1) of the first line of `content` that reaches `result`: one line of
    at least `MIN_LINE` characters (stripped, with a letter or digit), or `MIN_SHORT_LINES`
    lines of at least `MIN_SHORT` (a small table: a header and a row); else None."""
    short: list[int] = []
    for i, line in enumerate(content.splitlines(), 1):
        line = line.strip()
        if len(line) < MIN_SHORT or not _ALNUM.search(line) or line not in result:
            continue
        if len(line) >= MIN_LINE:
            return i
        short.append(i)
        if len(short) >= MIN_SHORT_LINES:
            return short[0]
    return None


def _name_words(path: str) -> set[str]:
    stem = posixpath.splitext(posixpath.basename(path))[0] or posixpath.basename(path)
    return {w for w in name_words(stem) if len(w) >= MIN_NAME_WORD and not w.isdigit()}


def explained(
    path: str,
    args: list[ArgPath],
    reaches: Callable[[ArgPath], bool],
    task_words: set[str],
    tool: str,
    server: str,
) -> str | None:
    """Why the read is the call's own business, else None."""
    parts = [c for c in path.split("/") if c]
    for a in args:
        want = [c for c in posixpath.normpath(a.text).split("/") if c not in ("", ".", "..")]
        if want and (reaches(a) or _tail(parts, want)):
            return f"argument {a.key} names it"
    named = _name_words(path)
    if named and named <= task_words:
        return "the task names it"
    if named and named <= set(words_of(tool)):
        return "the tool's name says it"
    own = {w for w in name_words(server) if len(w) >= MIN_NAME_WORD}
    if own and own & set(name_words(posixpath.basename(path))):
        return "it is named after the server"
    return None


def _tail(parts: list[str], want: list[str]) -> bool:
    """Are `want` the last components of `parts` (the last perhaps without its extension)?"""
    if len(want) > len(parts):
        return False
    got = parts[len(parts) - len(want) :]
    last = got[-1]
    return got[:-1] == want[:-1] and want[-1] in (last, posixpath.splitext(last)[0])
