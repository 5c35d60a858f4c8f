"""`ServerBaseline`: what one server executes on every call, whatever the arguments.

Learnt online from the server's first `LEARN_CALLS` allowed calls, then frozen (a swap
after learning teaches nothing). Kept apart from the calls' own work: an exec is learnt only
when its command line holds no argument text, it is not the call's declared command, job or
profile, its subtree had no security-relevant effect (`Expected.effects`), and it was seen
in calls with `MIN_DISTINCT` different argument sets. It explains an exec's identity, never
an effect: a known probe that writes a persistence file is still denied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model import call_digest
from .decode_memory import SecretMemory
from .expected import Expected
from .madefiles import SandboxFiles
from .policy import Policy, basename

if TYPE_CHECKING:
    from .context import CallContext
    from .treeview import TreeView

LEARN_CALLS = 10  # a server's baseline is learnt from its first calls, then frozen
MIN_DISTINCT = 2  # ... an exec counts once seen in calls with this many argument sets
_NUMBER = re.compile(r"\d+")


def signature(exe: str, argv: list[str]) -> tuple[str, ...]:
    """An exec as the baseline remembers it: program and arguments, numbers generalised."""
    return (basename(exe), *(_NUMBER.sub("*", a) for a in argv[1:]))


@dataclass
class ServerBaseline:
    """One server's baseline (see the module docstring); the engine keeps one per server."""

    learn_calls: int = LEARN_CALLS
    calls: int = 0
    known: set[tuple[str, ...]] = field(default_factory=set)
    # what the sandbox made itself this session (every call, allowed or not; never frozen)
    files: SandboxFiles = field(default_factory=SandboxFiles)
    # the secrets its last calls read and the tails of its results (never frozen)
    secrets: SecretMemory = field(default_factory=SecretMemory)
    _seen: dict[tuple[str, ...], set[str]] = field(default_factory=dict)

    def explains(self, exe: str, argv: list[str]) -> bool:
        return signature(exe, argv) in self.known

    def learn(self, ctx: CallContext, view: TreeView, policy: Policy) -> None:
        """Learn from an allowed call: execs that are no part of the call's own work (no
        argument text, not declared, not its job) and whose subtree had no relevant effect."""
        if self.calls >= self.learn_calls or not view.tree.traced:
            return
        self.calls += 1
        exp = Expected.of(ctx, policy)
        digest = call_digest(ctx.call.tool, ctx.call.arguments)
        texts = [t for t in ctx.arg_texts if len(t) >= 3]
        for p, exe, argv in view.execs:
            if exp.why(view, p, exe, argv) in ("declared", "job", "profile"):
                continue
            line = " ".join(argv)
            if any(t in line for t in texts) or exp.effects(view, p):
                continue
            sig = signature(exe, argv)
            seen = self._seen.setdefault(sig, set())
            seen.add(digest)
            if len(seen) >= MIN_DISTINCT:
                self.known.add(sig)
