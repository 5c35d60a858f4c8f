"""Does the user's task ask for what a tool does? Read from the tool's name and the task's words.

A task wants a tool when it names the tool, or the last meaningful word of its name (what it
acts on: `get_yahoo_finance_news` -> news) in some form (`screenshots`, `information` for
`info`) or by a synonym of the policy's `lists.name_synonyms` ("email him" for
`send_message`). A task *asks for the change* a tool makes (`delete_note`, `send_message`)
when it also says the change: one of the name's change words (`rules.induced-call.
change_words`) or a synonym ("save a note" for `write_note`). Errors lean one way: a task
misread as asking only spares a call, it never denies one.

`asks_operation` reads a task that asks for the called tool's own operation in words no
list holds ("Void invoice INV-1003", "Back up the docs folder", "Ziehe Version 2.3.1
zurück"): a clause that orders something (`intent.acting_clauses`: not a read, a question,
a statement or a negation) opens with the tool's verb (the first word of its name, not a
read word) in some form, or names one of the call's argument values. A tool whose name
says it reads (get_, list_, show_) never gets this consent.
"""

from __future__ import annotations

import re

from .context import CallContext
from .intent import READ_WORDS, acting_clauses, base_forms, clause_head
from .names import common_words, same_word, stem, words_of
from .policy import Policy
from .provenance import UntrustedText

MIN_COMPOUND_HEAD = 3  # letters of a compound's first word (log-in, sign-up, check-out)
MIN_COMPOUND_TAIL = 2
MIN_OPERATION_VALUE = 3  # characters of an argument value that names the call's object


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


def tool_verb(tool: str, policy: Policy) -> str | None:
    """The operation a tool's name says (its first word: void_invoice -> void, backup,
    unpublish), or None when that word reads or says nothing (get_, list_, show_, tool)."""
    words = words_of(tool)
    if not words or not words[0].isalpha():
        return None
    verb = words[0]
    if verb in READ_WORDS or verb in policy.generic_name_words:
        return None
    return verb


def _says_verb(verb: str, head: list[str], policy: Policy) -> bool:
    """A clause's head says `verb`: a form of it (logged, voiding), a synonym, or its two
    words (`backup`: "back up")."""
    if not head:
        return False
    first = head[0]
    if "".join(head) == verb or same_word(stem(first), stem(verb), policy.synonyms):
        return True
    return verb in base_forms(first) or stem(first) == stem(verb)


def _names_value(clause: str, value: str) -> bool:
    v = value.strip().lower()
    if len(v) < MIN_OPERATION_VALUE or "\n" in v:
        return False
    return re.search(rf"(?<![\w.-]){re.escape(v)}(?![\w-]|\.\w)", clause) is not None


def asks_operation(ctx: CallContext, policy: Policy) -> str | None:
    """Why the task asks for the called tool's own operation (see the module docstring),
    or None."""
    task = ctx.task_text
    verb = tool_verb(ctx.call.tool, policy)
    if task is None or verb is None:
        return None
    negations = frozenset(policy.spec.lists.change_negations)
    for clause in acting_clauses(task, negations):
        if _says_verb(verb, clause_head(clause), policy):
            return f"the task orders the tool's operation ({verb!r}): {clause[:80]!r}"
        for key, value in ctx.arg_items:
            if _names_value(clause, value):
                return f"the task orders something done to {value[:40]!r} ({key}): {clause[:80]!r}"
    return None
