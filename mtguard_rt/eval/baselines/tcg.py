"""Agent-Aegis Tool Call Governance (TCG), re-implemented from its published description.

`ToolCallGovernance().check(tool, arguments)` judges one declared call, before execution, from
its text alone: NFKC + lower-case normalisation with zero-width/bidi characters stripped;
command text only from a `command`/`cmd` argument; path candidates only from `path`/
`file_path`/`filePath`. Ordered checks, first hit wins: sensitive-path text by tool type,
deletes outside the workspace, protected paths, command obfuscation, high-risk commands,
inline `sh -c`/`python -c` bodies re-checked, repeated identical mutating calls. Returns the
reason it blocks, or None. Stateful only for the repetition check (`reset()` between runs).
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from collections import Counter
from typing import Any

INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
COMMAND_KEYS = ("command", "cmd")
PATH_KEYS = ("path", "file_path", "filepath")
SENSITIVE_TEXT = re.compile(
    r"(^|[\s/~'\"=])\.ssh(/|\b)|\.(bashrc|bash_profile|bash_login|profile|zshrc|zprofile)\b"
)
PROTECTED = (
    "/etc/",
    "/boot/",
    "/bin/",
    "/sbin/",
    "/usr/",
    "/lib/",
    "/lib64/",
    "/sys/",
    "/proc/",
    "/dev/",
    "/root/",
    "/var/lib/",
)
MAX_COMMAND = 10_000
REPEAT_LIMIT = 3  # the third identical mutating call is blocked
OBFUSCATION: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx))
    for name, rx in (
        ("base64 decoded into a shell", r"base64\s+(-d|--decode)\b.*\|\s*(ba|z|da)?sh\b"),
        (
            "xxd/printf hex decoded into a shell",
            r"(xxd\s+-r|printf\s+['\"]?(\\x[0-9a-f]{2})+).*\|\s*(ba|z|da)?sh\b",
        ),
        ("eval of a decoder", r"\beval\b.*(base64|xxd|printf|openssl\s+enc)"),
        ("download piped into a shell", r"\b(curl|wget)\b[^|]*\|\s*(sudo\s+)?(ba|z|da)?sh\b"),
        ("process substitution of a download", r"<\(\s*(curl|wget)\b"),
        ("heredoc into a shell", r"\b(ba|z|da)?sh\s*<<-?\s*['\"]?\w+"),
        ("ansi-c quoted escapes", r"\$'[^']*\\(x[0-9a-f]{2}|[0-7]{3})"),
        (
            "interpreter one-liner with decode/eval",
            r"\b(python[0-9.]*\s+-c|node\s+-e)\b.*(b64decode|base64|eval|exec|fromhex|atob)",
        ),
        (
            "powershell encoded command",
            r"\b(powershell|pwsh)(\.exe)?\b.*\s-(e|enc|encodedcommand)\s",
        ),
        (
            "variable splicing",
            r"\b\w+=['\"]?\w+['\"]?;\s*\w+=['\"]?\w+['\"]?;.*\$\{?\w+\}?\$\{?\w+\}?",
        ),
    )
)
HIGH_RISK: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx))
    for name, rx in (
        (
            "recursive delete of root or home",
            r"\brm\s+(-[a-z]*\s+)*-[a-z]*r[a-z]*\s+(-[a-z]*\s+)*(/|~|\$home|/home|/root)(\s|/?\*?$|/\*)",
        ),
        ("filesystem format", r"\bmkfs(\.\w+)?\b"),
        ("shutdown/reboot", r"\b(shutdown|reboot|halt|poweroff)\b"),
        ("dd to a device", r"\bdd\b.*\bof=/dev/"),
        ("fork bomb", r":\(\)\s*\{\s*:\|:&\s*\};:"),
        ("chmod 777 of root", r"\bchmod\s+(-r\s+)?777\s+/(\s|$)"),
    )
)
INLINE = re.compile(r"\b(?:(?:ba|z|da)?sh\s+-c|python[0-9.]*\s+-c)\s+(['\"])(.*?)\1")
MUTATING_WORDS = (
    "write",
    "delete",
    "remove",
    "create",
    "update",
    "send",
    "post",
    "run",
    "exec",
    "move",
    "rename",
    "upload",
    "set",
    "put",
    "fill",
    "click",
)


def normalise(text: str) -> str:
    return INVISIBLE.sub("", unicodedata.normalize("NFKC", text)).lower()


def tool_type(tool: str) -> str:
    name = normalise(tool)
    if any(w in name for w in ("command", "shell", "exec", "terminal", "bash")):
        return "shell"
    if any(w in name for w in ("delete", "remove", "unlink")):
        return "delete"
    if any(w in name for w in ("write", "edit", "create", "append", "save")):
        return "write"
    if any(w in name for w in ("read", "open", "cat", "view", "list")):
        return "read"
    return "other"


class ToolCallGovernance:
    def __init__(self, workspace: str = "/workspace") -> None:
        self.workspace = workspace.rstrip("/") + "/"
        self.seen: Counter[str] = Counter()

    def reset(self) -> None:
        self.seen.clear()

    def check(self, tool: str, arguments: dict[str, Any]) -> str | None:
        kind = tool_type(tool)
        lowered = {normalise(str(k)): v for k, v in arguments.items()}
        command = next((normalise(str(lowered[k])) for k in COMMAND_KEYS if k in lowered), "")
        paths = [normalise(str(lowered[k])) for k in PATH_KEYS if k in lowered]
        reason = self._paths(kind, paths) or (self._command(command) if command else None)
        if reason is None:
            reason = self._repeated(tool, arguments)
        return reason

    def _paths(self, kind: str, paths: list[str]) -> str | None:
        for path in paths:
            if kind in ("read", "write", "delete") and SENSITIVE_TEXT.search(path):
                return f"sensitive path {path!r} for a {kind} tool"
            if kind == "delete" and not path.startswith(self.workspace):
                return f"delete outside the workspace: {path!r}"
            if kind in ("write", "delete") and path.startswith(PROTECTED):
                return f"protected path {path!r}"
        return None

    def _command(self, command: str, depth: int = 0) -> str | None:
        if SENSITIVE_TEXT.search(command):
            return "command touches a sensitive path (.ssh or a shell rc file)"
        if len(command) > MAX_COMMAND:
            return f"command longer than {MAX_COMMAND} characters"
        for name, rx in OBFUSCATION:
            if rx.search(command):
                return f"command obfuscation: {name}"
        for name, rx in HIGH_RISK:
            if rx.search(command):
                return f"high-risk command: {name}"
        if depth == 0:
            for match in INLINE.finditer(command):
                inner = self._command(match.group(2), depth + 1)
                if inner is not None:
                    return f"inline script: {inner}"
            try:
                words = shlex.split(command)
            except ValueError:
                words = []
            for i, w in enumerate(words[:-1]):
                if w == "-c" and i > 0 and re.search(r"(sh|python[0-9.]*)$", words[i - 1]):
                    inner = self._command(words[i + 1], depth + 1)
                    if inner is not None:
                        return f"inline script: {inner}"
        return None

    def _repeated(self, tool: str, arguments: dict[str, Any]) -> str | None:
        if not any(w in normalise(tool) for w in MUTATING_WORDS):
            return None
        key = normalise(tool) + json.dumps(arguments, sort_keys=True, default=str)
        self.seen[key] += 1
        if self.seen[key] >= REPEAT_LIMIT:
            return f"identical mutating call repeated {self.seen[key]} times"
        return None
