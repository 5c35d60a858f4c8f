"""Consent: a write to a persistence file that the user asked for, in this call, is allowed.

`WriteConsent(ctx, policy).allows(path)` holds when the task (the user's turns) and the
call's own arguments both name `path`, a persistence location or a write-only canary
(~/.bashrc), and every line the call writes is asked for by the task: each word of it is in
the task, bar function words and the words of rc-file plumbing (`export`, `alias`, `echo`;
task: "add the alias ll='ls -la' to my ~/.bashrc", call: an edit of ~/.bashrc adding exactly
that line). Another path, or a line the task never asked for (`curl ... | sh`), gets no
consent. Text an argument only locates (`old_string`, `search`) is not written; lines it
shares with the new text are unchanged context. No task, no consent (`explains`: a call
without a task may still write what its arguments name). What consent covers is writing
(and replacing) the file: never reading a canary secret, never another path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .context import CallContext
from .policy import PERSISTENCE, Policy
from .provenance import STOP_WORDS, tokens
from .text import leaf_key, names_path

# argument names whose text only locates what is replaced (it is read, not written) ...
_LOCATES = re.compile(r"old|search|find|original|pattern|match|before|target_text", re.I)
# ... and names whose text is written (an option word elsewhere, `mode: append`, is not)
_WRITES = re.compile(
    r"content|text|data|body|new|replace|line|value|command|cmd|script|code|append|insert|"
    r"snippet|edit|patch",
    re.I,
)
_OPTION = re.compile(r"[\w.\-]+")
# the words of rc-file plumbing: definitions and the ways a shell appends a line
RC_WORDS = frozenset(
    "export alias unalias set setenv unset source echo printf tee cat eof e n".split()
)


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(key path, text) of every string leaf (numbers and booleans are options, not text)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


class WriteConsent:
    """What the user consented to this call writing (see the module docstring)."""

    def __init__(self, ctx: CallContext, policy: Policy) -> None:
        self.ctx = ctx
        self.policy = policy
        self._task = ctx.task_text
        self._seen: dict[str, str | None] = {}  # path -> why consented, None: not

    def allows(self, path: str) -> bool:
        return self.why(path) is not None

    def why(self, path: str) -> str | None:
        """The consent line for an absolute `path`, or None when the call has none for it."""
        if path not in self._seen:
            self._seen[path] = self._decide(path)
        return self._seen[path]

    def explains(self, path: str) -> bool:
        """Is a write to the persistence location `path` explained? By consent, or, in a
        call without a task, by arguments that name it (then the pre-audit judged them)."""
        if self.allows(path):
            return True
        return self._task is None and names_path(self.ctx.arg_texts, path)

    def paths(self, candidates: list[str]) -> list[str]:
        """The candidates (absolute paths) this call may write."""
        return [p for p in candidates if self.allows(p)]

    def _decide(self, path: str) -> str | None:
        task, policy = self._task, self.policy
        if task is None or not path.startswith("/"):
            return None
        if not (policy.classify(path) & PERSISTENCE or policy.canary_write_only.matches(path)):
            return None
        if not names_path([task], path):
            return None
        named = [key for key, text in self.ctx.arg_items if names_path([text], path)]
        if not named or self.unasked(path):
            return None
        return (
            f"{path}: written with the user's consent (the task and argument {named[0]!r} "
            "name it, and the task asks for every line written)"
        )

    def unasked(self, path: str) -> list[str]:
        """The lines the call would write to `path` that the task does not ask for."""
        asked = self.ctx.task_tokens
        own = tokens(path) | {"home"}
        return [
            f"argument {key!r} writes {line!r}"
            for key, line in self._written(path)
            if not (tokens(line) - STOP_WORDS - RC_WORDS - own) <= asked
        ]

    def _written(self, path: str) -> list[tuple[str, str]]:
        leaves = list(_strings(self.ctx.call.arguments))
        located = {
            line.strip()
            for key, text in leaves
            if _LOCATES.search(leaf_key(key))
            for line in text.splitlines()
        }
        out: list[tuple[str, str]] = []
        for key, text in leaves:
            name, bare = leaf_key(key), text.strip()
            if _LOCATES.search(name):
                continue  # only locates the text it replaces
            if not any(c.isspace() for c in bare) and names_path([bare], path):
                continue  # the target itself
            if not _WRITES.search(name) and _OPTION.fullmatch(bare):
                continue  # an option word (`mode: append`, `encoding: utf-8`)
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#") and line not in located:
                    out.append((key, line))
        return out
