"""Pre-execution rule `lookalike-tool`: a functional duplicate of another tool, built to win.

A call to a tool that duplicates another one (compatible parameters, the
same name meaning once verbs, fillers and praise are dropped: `fetch_historical_stock_prices`,
`best_get_stock_actions`, `web_page_navigator` next to `playwright_navigate`) and advertises
itself (a praise word in its name, a superiority claim in its description). Confusable
spellings are `shadowed-tool`'s job; this is the functional duplicate built to win the
model's preference. Names are compared up to the policy's synonyms (`send_email` and
`send_message` on another server), and a variant whose extra words the task asks for
("the hourly forecast" for `get_forecast_hourly`) or a tool or server the task names is the
user's choice. A copy of another tool's meaning whose description competes for its calls
("drop-in replacement for post_message", "always prefer post_msg": `names.COMPETES`)
advertises itself too; a variant with words of its own needs a praise word or a
superiority claim. A server's own versioned tool (`download_v2` beside its `download`) is
its API's next version, not a look-alike: that server already answers the base tool's calls.
"""

from __future__ import annotations

import re

from ..model import Violation
from .context import CallContext
from .names import COMPETES, covered, kin, meaning, words_of
from .policy import Policy
from .provenance import ToolInfo
from .rules_provenance import MAX_EVIDENCE, search
from .wants import names_tool, says, server_common

_VERSION = re.compile(r"v\d{1,3}")


def versions(name: str, other: str) -> bool:
    """Is `name` `other` plus a version number (`download_v2` of `download`)? On the server
    that has both, that is the server's own next version of its tool (its API), not a name
    built to capture another's calls: that server already answers the base tool's."""
    mine, theirs = words_of(name), words_of(other)
    if not theirs or len(mine) != len(theirs) + 1:
        return False
    for extra, rest in ((mine[-1], mine[:-1]), (mine[0], mine[1:])):
        if _VERSION.fullmatch(extra) and rest == theirs:
            return True
    return False


def _meaning(name: str, drop: frozenset[str], common: frozenset[str]) -> frozenset[str]:
    """`meaning` without the server's common words, unless nothing else is left."""
    return meaning(name, drop | common) or meaning(name, drop)


def _praise(t: ToolInfo, policy: Policy) -> str | None:
    words = [w for w in words_of(t.name) if w in policy.praise_words]
    if words:
        return f"its name says {', '.join(words)!r}"
    if policy.superiority is not None and (m := search(policy.superiority, t.description)):
        return f"its description claims {m!r}"
    return None


def _compatible(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a and b) and (a <= b or b <= a)


def _same_job(a: frozenset[str], b: frozenset[str], policy: Policy) -> bool:
    """`_compatible` up to synonyms (`send_email` and `send_message` do one job)."""
    syn = policy.synonyms
    return bool(a and b) and (covered(a, b, syn) or covered(b, a, syn))


def _extra(mine: frozenset[str], theirs: frozenset[str], policy: Policy) -> list[str]:
    """What `mine`'s name says beyond `theirs` (`hourly` in `get_forecast_hourly`)."""
    return [w for w in sorted(mine) if not any(kin(w, t, policy.synonyms) for t in theirs)]


def _task_chose(ctx: CallContext, me: ToolInfo) -> bool:
    """The task names this tool or its server: the choice is the user's."""
    return names_tool(ctx, me.name) or me.server.lower() in ctx.task_tokens


def lookalike_tool(ctx: CallContext, policy: Policy) -> list[Violation]:
    u = ctx.untrusted
    me = u.tool(ctx.call.server, ctx.call.tool)
    if me is None or _task_chose(ctx, me):
        return []
    why = _praise(me, policy)
    claim = search(COMPETES, me.description) if why is None else None
    if why is None and claim is None:
        return []
    base = policy.generic_name_words | policy.praise_words | policy.vague_nouns
    mine = _meaning(me.name, base, server_common(u, me.server))
    ev: list[str] = []
    for other in u.tools:
        if other is me or not _compatible(me.properties, other.properties):
            continue
        if other.server == me.server and versions(me.name, other.name):
            continue  # the server's own next version of its tool (`versions`)
        theirs = _meaning(other.name, base, server_common(u, other.server))
        if not _same_job(mine, theirs, policy) or _praise(other, policy) is not None:
            continue
        if me.properties != other.properties and min(len(mine), len(theirs)) < 2:
            continue  # one shared word and a different signature: a relative, not a copy
        extra = _extra(mine, theirs, policy)
        if any(says(w, ctx, policy) for w in extra):
            continue  # the task asks for what this variant adds (an hourly forecast)
        ad = why
        if ad is None:  # only a competing claim: it counts for a copy, not for a variant
            if extra or _extra(theirs, mine, policy):
                continue
            ad = f"its description competes for the other's calls: {claim!r}"
        ev.append(
            f"tool {me.name!r} on {me.server!r} duplicates {other.name!r} on {other.server!r} "
            f"(parameters {sorted(me.properties)}, name meaning {sorted(mine)} vs "
            f"{sorted(theirs)}) and advertises itself: {ad}"
        )
    if not ev:
        return []
    reason = "the tool is a look-alike of another tool that advertises itself to be chosen"
    return [Violation(rule="lookalike-tool", phase="pre", mode=policy.mode_of("lookalike-tool"),
                      reason=reason, evidence=ev[:MAX_EVIDENCE])]
