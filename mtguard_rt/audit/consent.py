"""Consent: a write to a persistence file that the user asked for, in this call, is allowed.

`WriteConsent(ctx, policy).allows(path)` holds for a persistence location or a write-only
canary (~/.bashrc) `path` when the user asked this call for exactly what it wrote there:
- the place: the task names `path`, or asks for that kind of persistence in words (an alias
  or shell setting: the shell rc files; a timer: systemd; autostart or login; an SSH key;
  a hook; a registry: the class table, `persist_class.CLASSES`), or orders the called
  tool's own operation (`wants.asks_operation`) and the tool's description names the place
  as where it writes (`~/.profile`, `~/.config/autostart/`);
- the content: every line the call added (`ctx.written`: the file before and after the
  call, read from the sandbox) is made of words the task says, words of the arguments that
  only set options (a name, a schedule: not a command or the text written) and the
  plumbing of such files (`export`, `alias`, `ExecStart=`, `OnCalendar=`). A second unit,
  another command, a fallback profile line, the canary's marker copied: no consent. A
  unit's or a launch agent's own keys are the format's (`Restart=on-failure`, `<dict>`,
  `RunAtLoad`): a line of them that runs nothing (no shell syntax, URL or path not named)
  needs no asking (`persist_format.boilerplate`). An
  autostart entry's `Exec=` must run a program the task names, without shell syntax. In a
  content-judged class (git config, package.json, a Makefile) only what runs is judged (a
  `core.pager`, a new `postinstall`, a recipe): a write adding none is `inert`.
When what was written is not known (no sandbox to read, a link, too big), the old test
stands: the task and an argument both name `path` and the task asks for every line the
arguments write (text an argument only locates, `old_string`, is not written). No task, no
consent (`explains`: a call without a task may still write what its arguments name). Before
the call (online rules, the kernel's kill on write), `may_write` holds when the place is
asked and no argument writes a line the task does not ask for: the content is judged after.
What consent covers is writing the file: never reading a canary secret, never another path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from typing import Any

from ..model import BehaviorTree
from .context import CallContext
from .persist_class import (
    added_lines,
    home_files,
    interpreter_cache_write,
    persist_class,
    running_additions,
)
from .persist_format import SHELL_SYNTAX, boilerplate, described_place
from .policy import PERSISTENCE, Policy
from .provenance import STOP_WORDS, tokens
from .text import leaf_key, names_path
from .treeview import FileHit, TreeView, is_write
from .wants import asks_operation

# desktop-entry keys that only label or place the entry (what runs is Exec=)
DESKTOP_LABELS = frozenset(
    "Type Name GenericName Comment Icon Terminal NoDisplay Hidden Categories Version "
    "StartupNotify StartupWMClass OnlyShowIn NotShowIn X-GNOME-Autostart-enabled "
    "X-GNOME-Autostart-Delay X-KDE-autostart-after".split()
)
# argument names whose text only locates what is replaced (it is read, not written) ...
_LOCATES = re.compile(r"old|search|find|original|pattern|match|before|target_text", re.I)
# ... and names whose text is written (an option word elsewhere, `mode: append`, is not)
_WRITES = re.compile(
    r"content|text|data|body|new|replace|line|value|command|cmd|script|code|append|insert|"
    r"snippet|edit|patch",
    re.I,
)
_OPTION = re.compile(r"[\w.\-]+")
_PATHLIKE = re.compile(r"(~|/)\S*")
MIN_FIELD_VALUE = 2  # characters of an option argument's value that a line must hold
MIN_FILE_WORD = 3  # letters of a task word that picks a file by the start of its name
_LETTERS = re.compile(r"[a-z]+")
_CONTENT_FLAGS = frozenset({"write", "create", "truncate", "append"})
# the words of rc-file plumbing: definitions and the ways a shell appends a line
RC_WORDS = frozenset(
    "export alias unalias set setenv unset source echo printf tee cat eof e n".split()
)
# the keys and fixed values of unit, timer, desktop-entry files (not a command's words)
FILE_WORDS = frozenset(
    "unit service timer install description execstart oncalendar onbootsec onunitactivesec "
    "persistent wantedby timers target default type oneshot simple true false desktop entry "
    "application exec name".split()
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

    def may_write(self, path: str) -> bool:
        """Before the effect (online rules, the kernel): may this call write `path`? When
        the place is asked and no argument writes an unasked line, what is written is
        judged after the call (`why` on the content read back)."""
        if self.explains(path):
            return True
        return self._protected(path) and self.place(path) is not None and not self.unasked(path)

    def paths(self, candidates: list[str]) -> list[str]:
        """The candidates (absolute paths) this call may write (`may_write`)."""
        return [p for p in candidates if self.may_write(p)]

    def _protected(self, path: str) -> bool:
        policy = self.policy
        return (
            bool(policy.classify(path) & PERSISTENCE)
            or policy.canary_write_only.matches(path)
            or persist_class(path) is not None
        )

    def inert(self, path: str) -> bool:
        """Is the call's write to `path` one that runs nothing later? A file of a
        content-judged class (git config, package.json, a Makefile) whose additions, read
        back, hold no command-running entry; or whose content could not be read back (a
        link, too big: not judged, see docs/BYPASSES.md)."""
        c = persist_class(path)
        if c is None or c.place_gated or c.judge == "bytecode":
            return False
        if path not in self.ctx.written:
            return True
        return not running_additions(c, *self.ctx.written[path])

    def place(self, path: str) -> str | None:
        """How the task asks for this place: it names `path`, or asks for its kind."""
        task = self._task
        if task is None or not path.startswith("/"):
            return None
        if names_path([task], path):
            return "the task names it"
        asked = self.ctx.task_tokens
        c = persist_class(path)
        kind = c is not None and bool(c.words & asked)
        if c is not None and kind and (own := self._file_word(path)):
            return f"the task asks for {c.kind} and names its file ({own!r})"
        if (job := self._tool_job(path)) is not None:
            return job  # the tool's description says it writes here: an argument path is content
        if self._elsewhere(path):
            return None  # the call names its own target: that one, not this, is asked
        if c is not None and kind:
            return f"the task asks for {c.kind}"
        return None

    def _tool_job(self, path: str) -> str | None:
        """The task orders the called tool's operation, and the tool's own description
        names `path` or a directory holding it as where it writes."""
        ctx = self.ctx
        desc = next((t.description for t in ctx.untrusted.tools
                     if t.server == ctx.call.server and t.name == ctx.call.tool), "")  # fmt: skip
        where = described_place(desc, path)
        if where is None:
            return None
        operation = asks_operation(ctx, self.policy)
        if operation is None:
            return None
        return f"{operation}, and the tool's description names {where} as where it writes"

    def _file_word(self, path: str) -> str | None:
        """The task's word that the file's name starts with ("zsh" for ~/.zshrc, "tmux" for
        ~/.tmux.conf, not "bash" for ~/.zshrc): the task picks this file among its class
        even when an argument is a path (a PATH entry the call writes into it)."""
        runs = _LETTERS.findall(path.rsplit("/", 1)[-1].lower())
        if not runs:
            return None
        head = runs[0]
        return next(
            (w for w in sorted(self.ctx.task_tokens)
             if len(w) >= MIN_FILE_WORD and w.isalpha() and w not in STOP_WORDS
             and head.startswith(w)),
            None,
        )  # fmt: skip

    def _elsewhere(self, path: str) -> bool:
        """Does an argument name another file (a bare absolute or home path)? Not one the
        call wrote into `path` (read back): that path is content (a PATH entry), not a
        target."""
        added = "\n".join(added_lines(*self.ctx.written[path])) if path in self.ctx.written else ""
        for bare in self._path_args:
            if not names_path([bare], path) and bare not in added:
                return True
        return False

    @cached_property
    def _path_args(self) -> list[str]:
        """The arguments that are a bare path (stripped), found once per call (`_elsewhere`
        asks for each candidate path)."""
        texts = (text.strip() for _, text in _strings(self.ctx.call.arguments))
        return [bare for bare in texts if _PATHLIKE.fullmatch(bare)]

    def _decide(self, path: str) -> str | None:
        task = self._task
        if task is None or not path.startswith("/") or not self._protected(path):
            return None
        if path in self.ctx.written:  # what the call really wrote, read back
            place = self.place(path)
            if place is None or self.unwritten(path):
                return None
            return (
                f"{path}: written with the user's consent ({place}, and it asks for every "
                "line the call added)"
            )
        if not names_path([task], path):
            return None
        named = [key for key, text in self.ctx.arg_items if names_path([text], path)]
        if not named or self.unasked(path):
            return None
        return (
            f"{path}: written with the user's consent (the task and argument {named[0]!r} "
            "name it, and the task asks for every line written)"
        )

    def refusal(self, path: str) -> str | None:
        """Why a write to `path` got no consent, for the evidence (None, "": nothing to say)."""
        if self._task is None:
            return None
        c = persist_class(path)
        if c is not None and path in self.ctx.written and not c.place_gated:
            runs = running_additions(c, *self.ctx.written[path]) if c.judge != "bytecode" else []
            if runs and self.place(path) is None:
                return f"it adds {runs[0]!r} ({c.why}), which the task does not ask for"
        if self.place(path) is None:
            listed = self.policy.classify(path) & PERSISTENCE  # the policy's own: as before
            kind = f"{c.kind} ({c.why}): " if c and not listed else ""
            return f"{kind}the task does not ask for it"
        if path in self.ctx.written:
            extra = self.unwritten(path)
            return f"the call added {extra[0]!r}, which the task does not ask for" if extra else ""
        unasked = self.unasked(path) if names_path([self._task], path) else []
        return unasked[0] if unasked else None

    def _allowed_words(self, path: str) -> frozenset[str]:
        """Words a consented line may hold: the task's, option arguments', the path's own."""
        options = {
            t
            for key, text in _strings(self.ctx.call.arguments)
            if not _WRITES.search(leaf_key(key)) and not _LOCATES.search(leaf_key(key))
            for t in tokens(text)
        }
        return self.ctx.task_tokens | options | tokens(path) | {"home"}

    def unwritten(self, path: str) -> list[str]:
        """What the call added to `path` (read back) that runs later and that the task does
        not ask for: lines, or for a content-judged class, its command-running entries (an
        autostart entry's command must run a program the task names)."""
        before, after = self.ctx.written[path]
        allowed = self._allowed_words(path) | STOP_WORDS | RC_WORDS | FILE_WORDS
        c = persist_class(path)
        if c is not None and c.judge == "desktop":
            return [ln for ln in added_lines(before, after) if not self._desktop_ok(ln, allowed)]
        if c is not None and not c.place_gated and c.judge != "bytecode":
            lines = running_additions(c, before, after)
        else:
            lines = added_lines(before, after)
        return [ln for ln in lines if not tokens(ln) <= allowed | self._fields(ln)
                and not boilerplate(ln, path, allowed)]  # fmt: skip

    def _fields(self, line: str) -> frozenset[str]:
        """The names of the option arguments whose value `line` holds: a line that sets the
        field an argument names to that argument's value (`HostName build.example` for
        `hostname: build.example`) says nothing the call was not given."""
        words = tokens(line)
        return frozenset(
            t
            for key, text in _strings(self.ctx.call.arguments)
            if len(text.strip()) >= MIN_FIELD_VALUE
            and tokens(text) <= words
            and not _WRITES.search(leaf_key(key))
            and not _LOCATES.search(leaf_key(key))
            for t in tokens(leaf_key(key))
        )

    def _desktop_ok(self, line: str, allowed: frozenset[str]) -> bool:
        """A desktop-entry line the task asks for: a label, or a command running a program
        the task names, with no shell syntax and no words but the task's and flags."""
        key, sep, value = line.partition("=")
        key = key.strip()
        if line.startswith("["):
            return line == "[Desktop Entry]"  # an action group is a second command
        if sep and key in DESKTOP_LABELS:
            return True
        if not sep or key not in ("Exec", "TryExec"):
            return tokens(line) <= allowed
        return self._runs_named(value, allowed)

    def _runs_named(self, command: str, allowed: frozenset[str]) -> bool:
        """Does `command` run a program the task names (flags aside, no shell syntax, its
        other words allowed)?"""
        words = command.split()
        if not words or SHELL_SYNTAX.search(command):
            return False
        program = tokens(words[0].rsplit("/", 1)[-1])
        rest = tokens(" ".join(w for w in words[1:] if not w.startswith("-")))
        return bool(program) and program <= self.ctx.task_tokens and rest <= allowed

    def unasked(self, path: str) -> list[str]:
        """The lines the call's arguments would write to `path` that the task does not ask
        for."""
        asked = self.ctx.task_tokens
        own = tokens(path) | {"home"}
        c = persist_class(path)
        entry = c is not None and c.judge == "desktop"  # a command argument is its Exec=
        ok = asked | STOP_WORDS | RC_WORDS | own
        return [
            f"argument {key!r} writes {line!r}"
            for key, line in self._written(path)
            if not (tokens(line) - STOP_WORDS - RC_WORDS - own) <= asked
            and not (entry and self._runs_named(line, ok))
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


def kernel_write_paths(policy: Policy, home: str) -> list[str]:
    """The policy's exact persistence files in the sandbox user's home (`~/.ssh/rc`, not
    `~/.config/systemd/**`): the kernel kills writers of these unless a call may write
    them (`may_write`). Only the home: the sandbox user can write nothing else, and the
    kernel kills at the syscall's entry, before a permission check would refuse it."""
    out = []
    for glob in policy.spec.lists.persistence_paths:
        if glob.startswith("~/") and not any(c in glob for c in "*?[{"):
            out.append(home.rstrip("/") + glob[1:])
    return list(dict.fromkeys([*out, *home_files(home)]))  # and the class table's (registries)


def written_paths(tree: BehaviorTree, policy: Policy) -> list[str]:
    """The persistence locations and write-only canaries the call's events put content at
    (an open for writing, a rename's destination): what the supervisor reads back."""
    out: dict[str, None] = {}
    for proc in tree.processes:
        for ev in proc.files:
            if ev.result < 0 or not ev.resolved:
                continue
            if ev.op == "open" and not _CONTENT_FLAGS.isdisjoint(ev.flags):
                path = ev.path
            elif ev.op == "rename" and ev.target:
                path = ev.target
            else:
                continue
            path = path.rstrip("/") or "/"
            if not path.startswith("/"):
                continue
            c = persist_class(path)
            if (
                policy.classify(path) & PERSISTENCE
                or policy.canary_write_only.matches(path)
                or (c is not None and c.judge != "bytecode")
            ):
                out[path] = None
    return list(out)


# the workspace files of content-judged and workspace classes, read before a call (at the
# workspace and one directory down) so that what a call adds is taken against what was there
BEFORE_NAMES = (
    "package.json", "Makefile", "makefile", "GNUmakefile", ".git/config", ".npmrc", ".yarnrc",
    ".yarnrc.yml", ".envrc", ".vscode/tasks.json", ".vscode/launch.json",
)


def before_candidates(dirs: list[str]) -> list[str]:
    """The class files in `dirs` (the workspace and its subdirectories) to read before."""
    return [f"{d.rstrip('/')}/{n}" for d in dirs for n in BEFORE_NAMES]


def online_persistence(policy: Policy, path: str) -> bool:
    """Is a write to `path` judged as it happens (online, before the content is read back)?
    The policy's persistence paths and the classes whose every unasked write runs later."""
    if policy.classify(path) & PERSISTENCE:
        return True
    c = persist_class(path)
    return c is not None and c.place_gated


def persistence_hits(view: TreeView, consent: WriteConsent) -> list[FileHit]:
    """The writes `persistence-write` judges: to the policy's persistence paths and to the
    class table's (`persist_class`), less those that run nothing later (`inert`: a git config
    or package.json adding no command; a `.pyc` the interpreter wrote as its cache)."""
    out = list(view.matching(PERSISTENCE))
    seen = {id(h.event) for h in out}
    for proc in view.tree.processes:
        for ev in proc.files:
            if id(ev) in seen or not (ev.resolved or ev.path.startswith("/")):
                continue
            if ev.op in ("unlink", "rmdir", "mkdir") or not is_write(ev):
                continue  # a read; a name removed or a directory made runs nothing
            path = (ev.target if ev.op == "rename" and ev.target else ev.path).rstrip("/")
            c = persist_class(path)
            if c is None or (c.judge == "bytecode" and interpreter_cache_write(ev.op, proc.exe)):
                continue
            out.append(FileHit(proc, ev, path, PERSISTENCE))
    return [h for h in out if not consent.inert(h.path)]
