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
from .policy import PRIVILEGED, Policy, basename
from .rules_pre import violation
from .treeview import TreeView, describe, label

MAX_EFFECTS = 6  # effect lines shown per unexplained exec


def _unexplained(
    exp: Expected, view: TreeView, shells_only: bool
) -> list[tuple[ProcessNode, str, list[str], list[str]]]:
    """(process, exe, argv, effects) of each unexplained exec whose subtree had a relevant
    effect; one per subtree (an unexplained child of a reported exec is its effect)."""
    out: list[tuple[ProcessNode, str, list[str], list[str]]] = []
    reported: set[str] = set()
    for p, exe, argv in view.execs:
        if shells_only and not (exp.policy.is_shell(exe) or exp.policy.is_shell(argv[0])):
            continue
        why = exp.why(view, p, exe, argv)
        if why not in (None, "baseline"):
            continue
        if p.key in reported or any(a.key in reported for a in view.ancestors(p)):
            continue
        effects = exp.effects(view, p)
        if effects:
            reported.add(p.key)
            out.append((p, exe, argv, effects))
    return out


def _evidence(found: list[tuple[ProcessNode, str, list[str], list[str]]]) -> list[str]:
    ev: list[str] = []
    for p, _exe, argv, effects in found:
        ev.append(f"{label(p)} executed {shlex.join(argv)}")
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
