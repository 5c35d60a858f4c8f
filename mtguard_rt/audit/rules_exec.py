"""Post-execution process rules: unexplained execs with effects, privilege probing.

Only processes spawned during the call (`learned == "observed"`) count as executions: the
long-lived server (`seeded`) is its own interpreter. A shell or interpreter running is
evidence, not a verdict (`expected.py`): `unexpected-shell` (a tool whose job is not running
commands) and `command-mismatch` (a command tool running something it did not declare) deny
only an exec that the call does not explain (declared command, the tool's job, its learnt
profile, the server's baseline) whose subtree did something security-relevant; the
evidence names the exec and each effect.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..model import ProcessNode, Violation
from .context import CallContext
from .expected import Expected
from .identity import Program
from .policy import PRIVILEGED, Policy, basename
from .programs import programs_of
from .rules_pre import violation
from .text import names_path, words
from .treeview import TreeView, describe, label

MAX_EFFECTS = 6  # effect lines shown per unexplained exec
MIN_NAME = 3  # a file name shorter than this, in the task's words, names nothing in particular


def judged_program(exp: Expected, prog: Program) -> str | None:
    """How the exec rules judge what one exec ran: None when not as a shell or interpreter,
    else "" (a shell by its own name) or what it really was (a renamed copy of one, run by
    the dynamic loader, a program with no file on disk or one the session wrote: unknown
    programs are judged as a shell would be, unless the tool's job is running code, or,
    for a written one, unless the call or the task names it)."""
    policy = exp.policy
    shell = policy.is_shell(prog.exe) or (bool(prog.argv) and policy.is_shell(prog.argv[0]))
    if prog.unknown:
        if "code" in exp.jobs:
            return None  # the tool's declared job is running code
        if prog.kind == "made" and named_by_call(exp.ctx, prog.exe):
            return "" if shell else None  # the user asked to run what was built
        return prog.note
    return prog.note if shell else None


def named_by_call(ctx: CallContext, path: str) -> bool:
    """The call's arguments or the task name this program (its path, or its file name)."""
    if names_path(ctx.arg_texts, path):
        return True
    name = basename(path).lower()
    return len(name) >= MIN_NAME and (name in ctx.task_words or any(
        name in words(t) for t in ctx.arg_texts))  # fmt: skip


Found = tuple[ProcessNode, str, list[str], list[str], str]  # proc, exe, argv, effects, what ran


def _unexplained(exp: Expected, view: TreeView, shells_only: bool) -> list[Found]:
    """(process, exe, argv, effects, what it really ran) of each unexplained exec whose
    subtree had a relevant effect; one per subtree (an unexplained child of a reported exec
    is its effect). Each exec is judged as the program it really ran (`identity`)."""
    out: list[Found] = []
    reported: set[str] = set()
    programs = programs_of(exp.ctx, exp.policy)
    for p, exe, argv in view.execs:
        prog = programs.of(view, p, exe, argv)
        how = judged_program(exp, prog)
        if shells_only and how is None:
            continue
        why = exp.why(view, p, prog.exe, prog.argv)
        if why not in (None, "baseline"):
            continue
        if p.key in reported or any(a.key in reported for a in view.ancestors(p)):
            continue
        effects = exp.effects(view, p)
        if (prog.exe, prog.argv) != (exe, argv):  # its command line, read as what it is
            own = exp.command_effects(p, prog.exe, prog.argv)
            effects = list(dict.fromkeys([*own, *effects]))
        if prog.kind == "no-file" and how is not None and not exp.command_tool:
            effects = [f"{label(p)} ran a program with no file on disk", *effects]
        if effects:
            reported.add(p.key)
            out.append((p, exe, argv, effects, how or ""))
    return out


def _evidence(found: list[Found]) -> list[str]:
    ev: list[str] = []
    for p, _exe, argv, effects, how in found:
        ev.append(f"{label(p)} executed {shlex.join(argv)}" + (f" ({how})" if how else ""))
        ev.extend(f"  {e}" for e in effects[:MAX_EFFECTS])
    return ev


def unexpected_shell(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    exp = Expected.of(ctx, policy)
    if exp.command_tool:
        return []
    found = _unexplained(exp, view, shells_only=True)
    if not found:
        return []
    return [
        violation(
            "unexpected-shell",
            policy,
            "post",
            f"{ctx.call.tool!r} is not a command tool but spawned a shell or interpreter "
            "that did something security-relevant the call does not explain",
            _evidence(found),
        )
    ]


def command_mismatch(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    exp = Expected.of(ctx, policy)
    if not exp.command_tool:
        return []
    found = _unexplained(exp, view, shells_only=False)
    if not found:
        return []
    ev = _evidence(found)
    ev.append(f"declared: {' ; '.join(exp.declared_texts)[:200]}")
    return [
        violation(
            "command-mismatch",
            policy,
            "post",
            "observed commands differ from the declared command and did something "
            "security-relevant",
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
