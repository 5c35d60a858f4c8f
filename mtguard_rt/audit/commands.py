"""Declared shell commands versus observed execs, for command-running tools.

`split_commands(text)` turns a declared command line into its simple commands (split on
`; && || | & newline`, command substitutions included) as word lists, with environment
assignments and wrapper programs (`env`, `nohup`, `timeout 5`, ...) peeled off.
`exec_matches(argv, declared)` says whether an observed argv is one of them: same program
(by basename) and every argument equal to, or a glob/expansion of, a declared word.
"""

from __future__ import annotations

import fnmatch
import os.path
import re
import shlex
from collections.abc import Iterable

_PUNCT = ";&|()<>"
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_EXPANSION = re.compile(r"[$`]|\{.*,.*\}")
_BACKTICKS = re.compile(r"`([^`]*)`")
SUBSTITUTED = "$(...)"  # a word whose value is a command's output: any words may appear


def _lex(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=_PUNCT)
    lex.whitespace_split = True
    try:
        toks = list(lex)
    except ValueError:  # unbalanced quotes: fall back to plain words
        return text.split()
    out: list[str] = []
    for tok in toks:  # "))" or ");" arrive as one token: parentheses count one by one
        if len(tok) > 1 and _is_operator(tok) and ("(" in tok or ")" in tok):
            out.extend(tok)
        else:
            out.append(tok)
    return out


def _is_operator(token: str) -> bool:
    return bool(token) and all(c in _PUNCT for c in token)


def split_commands(text: str, wrappers: Iterable[str] = ()) -> list[list[str]]:
    """The simple commands of a declared command line, wrappers and assignments removed.

    Quote-aware: operators inside quotes are words. `$( )` and backticks contribute their
    inner commands; redirections and their targets are dropped.
    """
    wrap = set(wrappers)
    raw: list[list[str]] = []
    stack: list[list[str]] = []
    cur: list[str] = []
    toks = _lex(text)
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not _is_operator(tok):
            for inner in _BACKTICKS.findall(tok):
                raw.extend(split_commands(inner, wrappers))
            cur.append(SUBSTITUTED if "`" in tok else tok)
            continue
        if "<" in tok or ">" in tok:
            if cur and cur[-1].isdigit():
                cur.pop()  # the fd number of 2>file
            if i < len(toks) and not _is_operator(toks[i]):
                i += 1  # the redirection target
            continue
        if tok.startswith("(") and cur and cur[-1] == "$":
            cur[-1] = SUBSTITUTED
            stack.append(cur)
            cur = []
            continue
        raw.append(cur)
        cur = stack.pop() if tok.startswith(")") and stack else []
    raw.append(cur)
    raw.extend(stack)
    return [w for words in raw if (w := _strip(words, wrap))]


def _strip(words: list[str], wrap: set[str]) -> list[str]:
    words = [w for w in words if w not in ("{", "}", "!")]
    while words and _ASSIGN.match(words[0]):
        words.pop(0)
    while words and os.path.basename(words[0]) in wrap:
        words.pop(0)
        while words and (
            words[0].startswith("-")
            or re.fullmatch(r"[\d.]+[smhd]?", words[0])
            or _ASSIGN.match(words[0])
        ):
            words.pop(0)
    return words


def _program_matches(exe_or_argv0: str, declared: str) -> bool:
    return os.path.basename(exe_or_argv0) == os.path.basename(declared)


def _word_matches(observed: str, declared: str, home: str | None) -> bool:
    if observed == declared or _EXPANSION.search(declared):
        return True
    if home and declared.startswith("~"):
        declared = home + declared[1:]
        if observed == declared:
            return True
    if any(c in declared for c in "*?["):
        return fnmatch.fnmatchcase(observed, declared) or fnmatch.fnmatchcase(
            os.path.basename(observed), declared
        )
    return False


def exec_matches(
    exe: str, argv: list[str], declared: list[list[str]], home: str | None = None
) -> bool:
    """True when the observed exec (`exe`, `argv`) is one of the declared simple commands."""
    program = argv[0] if argv else exe
    observed_args = argv[1:]
    for words in declared:
        if not (_program_matches(program, words[0]) or _program_matches(exe, words[0])):
            continue
        wanted = words[1:]
        has_glob = any(_EXPANSION.search(w) or any(c in w for c in "*?[") for w in wanted)
        if not has_glob and len(observed_args) != len(wanted):
            continue
        if all(any(_word_matches(o, w, home) for w in wanted) for o in observed_args):
            return True
    return False


def shell_payload(argv: list[str]) -> str | None:
    """The script of `sh -c SCRIPT ...` (any shell), else None."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-c" or (arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")):
            return argv[i + 1] if i + 1 < len(argv) else None
        if not arg.startswith("-"):
            return None
    return None


def peel(argv: list[str], wrappers: Iterable[str]) -> list[str]:
    """An observed argv with wrapper programs (`timeout 5`, `env A=1`, `nohup`) removed."""
    words = _strip(list(argv), set(wrappers))
    return words or argv
