"""Post-execution process rules: unexpected shells, command mismatch, privilege probing.

Only processes spawned during the call (`learned == "observed"`) count as executions: the
long-lived server (`seeded`) is its own interpreter. For command-running tools every
observed exec must be one of the declared simple commands, the shell wrapping the declared
script, or a descendant of a declared program (`make` may run `cc`).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ..model import Violation
from .commands import exec_matches, peel, shell_payload, split_commands
from .context import CallContext
from .patterns import HOME_RE
from .policy import PRIVILEGED, Policy, basename
from .rules_pre import violation
from .text import leaf_key
from .treeview import TreeView, describe, label

ARGV_LISTS = frozenset({"args", "argv", "arguments"})
# Builtins a server may wrap around a declared command without running anything else.
HARMLESS_BUILTINS = frozenset({"cd", "export", "set", "umask", "true", ":", "unset", "wait"})


def unexpected_shell(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    if policy.is_command_tool(ctx.call.tool, ctx.input_schema):
        return []
    ev = [
        f"{label(p)} executed {shlex.join(argv)}"
        for p, exe, argv in view.execs
        if policy.is_shell(exe) or policy.is_shell(argv[0])
    ]
    if not ev:
        return []
    return [
        violation(
            "unexpected-shell",
            policy,
            "post",
            f"{ctx.call.tool!r} is not a command tool but spawned a shell or interpreter",
            ev,
        )
    ]


def declared_commands(ctx: CallContext, policy: Policy) -> list[str]:
    """The command text(s) the call declared, argv-style lists joined onto their command."""
    args = ctx.call.arguments
    texts = [t for k, t in ctx.arg_items if leaf_key(k).lower() in policy.command_arguments]
    for key, value in args.items():
        if key.lower() in ARGV_LISTS and isinstance(value, list):
            head = next((args[k] for k in args if k.lower() in policy.command_arguments), "")
            texts.append(shlex.join([str(head), *map(str, value)]).strip())
    return texts or ctx.arg_texts


def _squash(text: str) -> str:
    return " ".join(text.split())


def _script_declared(
    script: str,
    squashed: list[str],
    declared: list[list[str]],
    policy: Policy,
    home: str | None,
) -> bool:
    """A shell's script is the declared command line, or only declared commands and
    harmless builtins (a server may prepend `cd /workspace &&`)."""
    if any(_squash(script) in s for s in squashed):
        return True
    return all(
        words[0] in HARMLESS_BUILTINS or exec_matches(words[0], words, declared, home)
        for words in split_commands(script, policy.wrappers)
    )


def command_mismatch(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    if not policy.is_command_tool(ctx.call.tool, ctx.input_schema):
        return []
    texts = declared_commands(ctx, policy)
    declared = [w for t in texts for w in split_commands(t, policy.wrappers)]
    squashed = [_squash(t) for t in texts]
    home = next((m.group(0) for c in ctx.canaries if (m := re.match(HOME_RE, c))), None)
    declared_procs: set[str] = set()
    suspects: list[tuple[str, str]] = []
    for p, exe, argv in view.execs:
        peeled = peel(argv, policy.wrappers)
        shell = policy.is_shell(exe) or (bool(peeled) and policy.is_shell(peeled[0]))
        script = shell_payload(peeled) if shell else None
        if script is not None and _script_declared(script, squashed, declared, policy, home):
            continue  # the shell that runs the declared command line
        if exec_matches(exe, peeled, declared, home):
            declared_procs.add(p.key)
            continue
        suspects.append((p.key, f"{label(p)} executed {shlex.join(argv)}"))
    ev = [
        line
        for key, line in suspects
        if not any(a.key in declared_procs for a in view.ancestors(view.by_key[key]))
    ]
    if not ev:
        return []
    ev.append(f"declared: {' ; '.join(texts)[:200]}")
    return [
        violation(
            "command-mismatch",
            policy,
            "post",
            "observed commands differ from the declared command",
            ev,
        )
    ]


def privilege_escalation(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    ev: list[str] = []
    programs = policy.priv_programs
    for p, exe, argv in view.execs:
        line = shlex.join(argv)
        if basename(exe) in programs or basename(argv[0]) in programs:
            ev.append(f"{label(p)} executed {line}")
        elif policy.priv_commands is not None and policy.priv_commands.search(line):
            ev.append(f"{label(p)} executed {line}")
    for h in view.matching(PRIVILEGED):
        ev.append(f"{label(h.proc)} {h.event.op} {h.path} {describe(h.event)}")
    for p, fe in view.chmods:
        if policy.spec.rules.privilege_escalation.setuid_chmod and (fe.mode or 0) & 0o6000:
            ev.append(f"{label(p)} chmod {fe.path} to {fe.mode:o} (setuid/setgid)")
    if not ev:
        return []
    return [
        violation(
            "privilege-escalation",
            policy,
            "post",
            "the call probed for or attempted privilege escalation",
            ev,
        )
    ]
