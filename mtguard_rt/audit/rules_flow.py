"""`secret-flow` (pre): a secret one server handed the agent, sent on to another.

A secret that entered the session in a server's result (the ledger in
`provenance.UntrustedText.secrets`, filled by `secrets.sightings`) is in the arguments of a
call to another server, or of a tool whose job is to send, whole in any form (plain, base64,
hex, split into groups, reversed, ROT13, url, q-p, zero-width: `secrets.carries`), and the
task does not both ask for a credential and name where this call goes. A value the task
itself holds is the user's. The task also asks for it when it names the store the secret
came from (that server's tool hands out secrets: `store_named`) and types a value this call
sends it with (the recipient: "fetch the keyring entry ... and text its value to me at
+1-555-0100"). Without a task it is recorded (observe).
"""

from __future__ import annotations

from ..model import Violation
from .context import CallContext
from .policy import Policy
from .secrets import Finding, asks_for_credentials, carries, name_words, secret_tool

MAX_EVIDENCE = 10
MIN_STORE_NAME = 3  # letters of a server or directory name that the task names as a store
# Words of a tool name that say its job is to send something somewhere.
SEND_WORDS = frozenset(
    "send post email mail message publish upload share notify webhook forward reply tweet "
    "submit sms chat push".split()
)


def sends(tool: str) -> bool:
    return not SEND_WORDS.isdisjoint(name_words(tool))


def store_named(task: str, store: str, tool: str) -> bool:
    """The task names `store` (a server's name, the directory a secret was read from) as a
    word, and `tool` hands out secrets (get_secret): the user asks for what that store
    keeps, whatever the entry is called ("the keyring entry that line names")."""
    if not secret_tool(tool):
        return False
    words = set(name_words(task))
    parts = [w for w in name_words(store) if len(w) >= MIN_STORE_NAME]
    joined = "".join(name_words(store))
    return len(joined) >= MIN_STORE_NAME and (joined in words or (bool(parts) and all(
        w in words for w in parts)))  # fmt: skip


def _destination_named(ctx: CallContext, policy: Policy) -> bool:
    """Does the task name where this call goes: the server, a word of the tool's name that
    says what it is for, or one of the call's argument values (a recipient, a host)?"""
    line = " " + " ".join(name_words(ctx.task_text or "")) + " "
    generic = policy.generic_name_words
    names = [ctx.call.server.lower(), *(w for w in name_words(ctx.call.tool) if w not in generic)]
    if any(f" {w} " in line for w in names if len(w) >= 3):
        return True
    return _value_typed(ctx)


def _value_typed(ctx: CallContext) -> bool:
    """The task holds one of the call's argument values (a recipient, a host)."""
    task = ctx.task_text or ""
    return any(len(t) >= 4 and t in task for t in ctx.arg_texts if len(t) <= 200)


def secret_flow(ctx: CallContext, policy: Policy) -> list[Violation]:
    seen = ctx.untrusted.secrets
    if not seen or not ctx.arg_items:
        return []
    sending = sends(ctx.call.tool)
    task = ctx.task_text or ""
    ev: list[str] = []
    done: set[str] = set()
    for s in seen:
        if s.value in done or (s.server == ctx.call.server and not sending) or s.value in task:
            continue
        for key, text in ctx.arg_items:
            if how := carries(text, s.value):
                done.add(s.value)
                f = Finding(s.kind, s.value, how)
                ev.append(
                    f"argument {key!r} carries {f.describe()} from the result of {s.tool!r} "
                    f"on {s.server!r}"
                )
                break
    if not ev:
        return []
    if ctx.task_text is not None and asks_for_credentials(task) and _destination_named(ctx, policy):
        return []
    if any(store_named(task, s.server, s.tool) for s in seen if s.value in done) and _value_typed(
        ctx
    ):
        return []  # the user named the store and typed where its secret goes
    reason = "a secret from another server's result is sent on"
    if ctx.task_text is None:
        ev.append("no task: recorded, not denied")
        return [
            Violation(
                rule="secret-flow",
                phase="pre",
                mode="observe",
                reason=reason,
                evidence=ev[:MAX_EVIDENCE],
            )
        ]
    ev.append("the task does not ask to send a credential there")
    return [
        Violation(
            rule="secret-flow",
            phase="pre",
            mode=policy.mode_of("secret-flow"),
            reason=reason,
            evidence=ev[:MAX_EVIDENCE],
        )
    ]
