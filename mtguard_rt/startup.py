"""The start-up as audit records: what a server does before it first answers (issue 17).

From the sandbox's release (the gated start: guard.py) until the server answers its first
request (`initialize`, or `tools/list`), or the first call is due, whichever comes first, the
monitor's `BetweenFeed` cuts the cgroup's activity into start-up periods (several when the
start-up is long, cut as between-call periods are). Each becomes an `AuditRecord` with tool
`(startup)` (call id `<server>-startup-<n>`), post-verified like a between-call record
(between_calls.py) with no task, no arguments and no result. No call explains anything yet,
so only effects that need no call to be judged may deny (`STARTUP_DENY`: a secret read, a
persistence write, egress, control of another process, a kernel kill on touch); every other
rule's finding is kept as observe evidence. A confidentiality deny quarantines the server as a
call's does (`Supervisor._quarantine_after`). `end_startup(sup)` is awaited before the
server's first answer is relayed and before the first call: it cuts the start-up and waits,
bounded, until each of its records is judged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import msgspec

from .model import STARTUP_TOOL, DeclaredCall, Verdict

if TYPE_CHECKING:
    from .supervisor import Supervisor

_log = logging.getLogger(__name__)

# the rules whose finding may deny a start-up record: effects no call's job, arguments or
# task could explain (the others need a declared call: shells, commands, scope, results)
STARTUP_DENY = frozenset(
    {
        "canary-touched",
        "sensitive-file-read",
        "kill-on-touch",
        "persistence-write",
        "unexpected-network",
        "process-control",
    }
)
# judging the start-up is a few ms of rules (plus the LLM judge's latency, when one is set);
# past this the first answer / call goes on and the record comes when it comes
STARTUP_VERDICT_S = 30.0


def startup_call(server: str, seq: int) -> DeclaredCall:
    """The synthetic declared call a start-up record is about."""
    return DeclaredCall(call_id=f"{server}-startup-{seq}", server=server, tool=STARTUP_TOOL,
                        arguments={})


def startup_verdict(verdict: Verdict) -> Verdict:
    """A start-up record's verdict: only `STARTUP_DENY` findings keep their enforce mode."""
    violations = [
        v if v.rule in STARTUP_DENY or v.mode != "enforce"
        else msgspec.structs.replace(
            v, mode="observe", evidence=[*v.evidence, "at start-up: evidence, not a deny"]
        )
        for v in verdict.violations
    ]
    deny = any(v.mode == "enforce" for v in violations)
    return msgspec.structs.replace(
        verdict,
        decision="deny" if deny else "allow",
        phase="post" if deny else None,
        violations=violations,
    )


async def end_startup(sup: Supervisor) -> None:
    """The start-up is over (the server answered, or a call is due): cut its last period and
    wait, bounded by `STARTUP_VERDICT_S`, until each start-up record is judged (a
    confidentiality deny has quarantined the server by then). Cheap once done."""
    watch = sup.watch
    feed = getattr(watch, "between", None)
    if watch is None or feed is None or feed.startup_done:
        return
    end = getattr(watch, "end_startup", None)
    if end is not None:
        await end()
    else:
        feed.end_startup()
    with anyio.move_on_after(STARTUP_VERDICT_S) as scope:
        await feed.startup_judged()
    if scope.cancelled_caught:
        _log.warning("%s: start-up not judged within %g s; going on", sup.name,
                     STARTUP_VERDICT_S)
