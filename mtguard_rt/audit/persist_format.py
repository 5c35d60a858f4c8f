"""The formats of persistence entries a tool writes from a template, and where it says it writes.

`boilerplate(line, path, allowed)`: a line of a systemd unit or a launch agent that the format
brings and that runs nothing (XML markup, `Restart=on-failure`, `RunAtLoad`), so a consented
entry needs no asking for it; a line with shell syntax, a URL, an `Exec*` key or a path or
variable in its value is judged as content. `described_place(description, path)`: the home
path of a tool's description that names `path` or a directory holding it (`~/.profile`,
`~/Library/LaunchAgents/<label>.plist`). Pure functions of their text.
"""

from __future__ import annotations

import re

from .provenance import tokens

SHELL_SYNTAX = re.compile(r"[;|&`$<>()]|\b(?:sh|bash|dash|zsh)\s+-c\b")
# unit and launch-agent files: key/value templates whose own keys run nothing
_TEMPLATE_EXT = (".service", ".timer", ".socket", ".path", ".mount", ".target", ".plist")
PLIST_KEYS = frozenset(
    "label programarguments program runatload keepalive startinterval startcalendarinterval "
    "processtype".split()
)
_MARKUP = re.compile(r"<[^<>]*>")
_HOME_PATH = re.compile(r"~/[^\s)\]'\"`,;]*")
_PLACEHOLDER = re.compile(r"[<{]")
_HOME_ROOT = re.compile(r"^/(?:home/[^/]+|root)/")


def boilerplate(line: str, path: str, allowed: frozenset[str]) -> bool:
    """A line of a unit or launch agent that the format brings and that runs nothing: XML
    markup alone, a plist key or value the call was given, or a unit key other than Exec*
    whose value holds no path, variable, URL or shell syntax (`Restart=on-failure`)."""
    if not path.endswith(_TEMPLATE_EXT):
        return False
    plist = path.endswith(".plist")
    text = _MARKUP.sub(" ", line) if plist else line
    if not text.strip():
        return True
    if SHELL_SYNTAX.search(text) or "://" in text:
        return False
    if plist:
        return tokens(text) <= allowed | PLIST_KEYS
    key, sep, value = text.partition("=")
    return bool(sep) and not key.strip().lower().startswith("exec") and not any(
        c in value for c in "/$=~")  # fmt: skip


def described_place(description: str, path: str) -> str | None:
    """The home path of a tool's description that names `path` or a directory holding it
    (`~/.profile`, `~/Library/LaunchAgents/<label>.plist`), or None."""
    m = _HOME_ROOT.match(path)
    if m is None:
        return None
    rel = path[m.end() :]
    for tok in (str(hit.group(0)) for hit in _HOME_PATH.finditer(description)):
        want = tok[2:].rstrip(".")
        cut = _PLACEHOLDER.search(want)
        if cut is not None:
            want = want[: cut.start()]
            if want and rel.startswith(want):
                return tok
        elif want and (rel == want.rstrip("/") or (want.endswith("/") and rel.startswith(want))):
            return tok
    return None
