"""Does the user's task ask for what a tool does? Read from the tool's name and the task's words.

A task wants a tool when it names the tool, or the last meaningful word of its name (what it
acts on: `get_yahoo_finance_news` -> news) in some form (`screenshots`, `information` for
`info`) or by a synonym of the policy's `lists.name_synonyms` ("email him" for
`send_message`). A task *asks for the change* a tool makes (`delete_note`, `send_message`)
when it also says the change: one of the name's change words (`rules.induced-call.
change_words`) or a synonym ("save a note" for `write_note`). Errors lean one way: a task
misread as asking only spares a call, it never denies one.
"""

from __future__ import annotations

from .context import CallContext
from .names import common_words, same_word, stem, words_of
from .policy import Policy
from .provenance import UntrustedText

MIN_COMPOUND_HEAD = 3  # letters of a compound's first word (log-in, sign-up, check-out)
MIN_COMPOUND_TAIL = 2


def server_common(u: UntrustedText, server: str) -> frozenset[str]:
    """Words in most of a server's tool names (`playwright_`): they say which server."""
    return common_words(tuple(t.name for t in u.tools if t.server == server))


def _head(word: str) -> str:
    head = stem(word)
    return head[:-1] if len(head) > 4 and head.endswith("e") else head


def says(word: str, ctx: CallContext, policy: Policy) -> bool:
    """The task says `word` in some form or by a synonym."""
    head = _head(word)
    syn = policy.synonyms
    if any(
        t.startswith(head) or stem(t) == head or same_word(stem(t), stem(word), syn)
        for t in ctx.task_tokens
    ):
        return True
    return _compound(word, ctx.task_tokens)


def _compound(word: str, task: frozenset[str] | set[str]) -> bool:
    """A compound name word the task says as its two words (`login`: "log ... in", `signup`,
    `checkout`): a phrasal verb spelled as one word."""
    return any(
        word[:i] in task and word[i:] in task
        for i in range(MIN_COMPOUND_HEAD, len(word) - MIN_COMPOUND_TAIL + 1)
    )


def _meaningful(tool: str, server: str, ctx: CallContext, policy: Policy) -> list[str]:
    drop = policy.generic_name_words | policy.praise_words
    common = server_common(ctx.untrusted, server)
    words = [w for w in words_of(tool) if w not in drop and w not in common]
    return words or [w for w in words_of(tool) if w not in drop]


def names_tool(ctx: CallContext, tool: str) -> bool:
    text = (ctx.task_text or "").lower()
    return tool.lower() in text or " ".join(words_of(tool)) in text


def task_wants(
    ctx: CallContext, policy: Policy, tool: str | None = None, server: str | None = None
) -> bool:
    """Does the task ask for what `tool` (default: the called one) does?"""
    tool = ctx.call.tool if tool is None else tool
    server = ctx.call.server if server is None else server
    if names_tool(ctx, tool):
        return True
    words = _meaningful(tool, server, ctx, policy)
    if not words:
        return True  # a name that says nothing cannot be checked against the task
    return says(words[-1], ctx, policy)


def change_words(tool: str, policy: Policy) -> list[str]:
    """The words of a tool's name that say it changes or sends something."""
    return [w for w in words_of(tool) if stem(w) in policy.change_words or w in
            policy.change_words]


def task_asks_change(ctx: CallContext, policy: Policy) -> bool:
    """Does the task ask for the change the called tool makes (its change word or a synonym,
    and what it acts on)? True for a tool whose name says no change."""
    verbs = change_words(ctx.call.tool, policy)
    if not verbs or names_tool(ctx, ctx.call.tool):
        return True
    return any(says(v, ctx, policy) for v in verbs) and task_wants(ctx, policy)
