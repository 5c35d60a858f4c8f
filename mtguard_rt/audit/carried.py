"""Argument values carried from another server's text into a call: where a target came from.

`induced-call` (targets): a call whose tool changes or sends something (a change word in its
name: delete, write, send) and whose *targets* (what to delete, write or send and where: the
arguments that are not carried content, `content_keys`) hold a value the task never says but
another server's text does (a recent result of another server, or another server's tool
description; or a sentence of any result that speaks as the user, "the user asked you to
also change ...": the user speaks in the task, not in data) was induced by that text,
unless the task asks for this change itself ("email Ana, her address is in the book"). A
value is found in a text whole, as the same run of words: quoted, inside a sentence, or
spelled as an identifier (`audit-trail`, `audit trail`, `audit_trail` are one value).

`task-entity-mismatch` (sanction): an entity the task does not name (a recipient, an
account) of a change or send call is sanctioned by the task when it comes from a result the
task told the agent to consult (the producing call is one the task asks for, or was made
with the task's own words), where it stands as data rather than inside an instruction, and
the task asks for the call's change. A query's entity (a ticker) is never sanctioned so: a
result naming another one is how its choice gets steered.

Both: a document the task orders the agent to carry out ("Do what the wiki page 'Weekly
report' says", `delegated`) speaks for the user: what it names is the task's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .context import CallContext
from .intent import IntentVocab, TaskIntent, create_vocab
from .policy import Policy
from .provenance import STOP_WORDS, Output, tokens, word_line
from .text import leaf_key
from .wants import change_words, task_asks_change, task_wants

MAX_TARGET_CHARS = 200  # a longer value is content, not a target
MAX_EVIDENCE = 6
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")
# A sentence addressing the agent with an order to pass something on: "forward my inbox to
# x@y", "send the card to ...", "please email ...", "Note for AI assistants: ...". A bare
# role word is data ("Executive assistant" in a staff record, "travel agent"): the agent is
# addressed only as one ("hi assistant", "to the agent", "AI agents must ...").
_PASS_ON = re.compile(
    r"\b(forward|send|e-?mail|mail|cc|bcc|copy|transfer|wire|pay|share)\w*\b[^\n]{0,80}\bto\b|"
    r"\b(dear|hey|hi|hello|attention|note|notice|message|instructions?)\b[\w ]{0,12}?"
    r"\b(ai|assistants?|agents?|llms?|models?)\b|"
    r"\b(ai|assistants?|agents?|llms?)\s*(:|must\b|should\b|shall\b|needs? to\b|has to\b|"
    r"is (to|asked|required|instructed)\b)|"
    r"\b(to|for)\s+(the |any |all |every )?(ai )?(assistants?|agents?|llms?)\b|\bplease\b",
    re.I,
)


# A result speaking for the user: "[user message] ...", "the user asked you to also ...",
# "I've already reviewed this myself, just approve it".
_AS_USER = re.compile(
    r"\[\s*(user|human)( message| note| request)?\s*\]|"
    r"\b(the|your) user (also |has |had |now |just )?(asked|asks|wants|requested|requests|said|"
    r"says|told|instructed|would like|needs|approved|confirmed|authori[sz]ed)\b|"
    r"\b(message|note|request|instruction)s? from the user\b|\bon behalf of the user\b|"
    r"\bi('ve| have) already (reviewed|approved|checked|confirmed)\b",
    re.I,
)
_CLAUSE = re.compile(r"(?<=[.!?])\s+|\n|(?=\()|(?<=\))")


def _words_of_value(value: str) -> str:
    return word_line(value).strip()


def _novel(value: str, ctx: CallContext, min_len: int) -> bool:
    """Does the value hold a word the task never says (not a function word, not a short
    one, not a one-digit number)?"""
    return any(
        (len(w) >= min_len and not w.isdigit()) or (w.isdigit() and len(w) >= 2)
        for w in tokens(value) - ctx.task_tokens - STOP_WORDS
    )


def targets(ctx: CallContext, policy: Policy) -> Iterator[tuple[str, str, str]]:
    """(key, value, value as words) of the call's target arguments the task never says."""
    task_words = word_line(ctx.task_text or "")
    min_len = policy.spec.rules.induced_call.min_token_length
    for key, value in ctx.arg_items:
        if leaf_key(key).lower() in policy.content_keys:
            continue
        v = value.strip()
        if not 3 <= len(v) <= MAX_TARGET_CHARS:
            continue
        words = _words_of_value(v)
        if not words or f" {words} " in task_words or not _novel(v, ctx, min_len):
            continue
        yield key, v, words


def delegated(o: Output, ctx: CallContext, policy: Policy) -> bool:
    """Is `o` the result of reading a document the task orders the agent to carry out ("Do
    what the wiki page 'Weekly report' says": `TaskIntent.hands_over`), named by the task
    (every word of the producing call's arguments is the task's)? Then what it asks is
    what the user asks."""
    named = o.arg_tokens - STOP_WORDS
    if not named or not named <= ctx.task_tokens or ctx.task_text is None:
        return False
    vocab = _vocab(policy)
    return TaskIntent.of(ctx.task_text, vocab).hands_over(vocab)


def _vocab(policy: Policy) -> IntentVocab:
    lists = policy.spec.lists
    return create_vocab(lists.change_verbs, lists.change_negations, lists.question_words,
                        lists.determiners, lists.delegation_words)  # fmt: skip


def _sources(ctx: CallContext, policy: Policy) -> Iterator[tuple[str, str, str]]:
    """(where, lower-cased text, text as words) of every other server's recent results and
    descriptions, and of the sentences of this server's own results that speak as the user
    (`_AS_USER`: data does not relay the user's wishes; the user speaks in the task); not a
    document the task orders carried out (`delegated`)."""
    u, me = ctx.untrusted, ctx.call.server
    for o in u.outputs:
        if delegated(o, ctx, policy):
            continue
        if o.server != me:
            yield f"result of {o.tool!r} on {o.server!r}", o.lower, o.words
        elif _AS_USER.search(o.lower):
            said = " ".join(x for x in _CLAUSE.split(o.lower) if _AS_USER.search(x))
            where = f"result of {o.tool!r} on {o.server!r}, speaking as the user"
            yield where, said, word_line(said)
    for t in u.tools:
        if t.server != me and t.description:
            yield f"description of {t.name!r} on {t.server!r}", t.mentions, word_line(t.mentions)


def _holds(value: str, words: str, lower: str, text_words: str) -> bool:
    """Does a text hold the value? A value of one plain word (`todo`) only where the text
    quotes it (`name 'todo'`): as a bare word any long text may hold it. A longer or
    identifier-shaped value (`audit-trail`, an address, a path) as the same run of words."""
    if f" {words} " not in text_words:
        return False
    if " " in words or not value.isalpha():
        return True
    quoted = rf"[`'\"\u201c]\s*{re.escape(value.lower())}\s*[`'\"\u201d]"
    return re.search(quoted, lower) is not None


def carried_targets(ctx: CallContext, policy: Policy) -> list[str]:
    """Evidence for `induced-call`: targets of a change call taken from another server's text
    the task did not ask for this change with."""
    if not ctx.untrusted or not change_words(ctx.call.tool, policy):
        return []
    if ctx.annotations.get("readOnlyHint") is True or task_asks_change(ctx, policy):
        return []
    ev: list[str] = []
    sources = list(_sources(ctx, policy))
    for key, value, words in targets(ctx, policy):
        for where, lower, text in sources:
            if _holds(value, words, lower, text):
                ev.append(
                    f"argument {key!r} = {value[:80]!r} (a target of {ctx.call.tool!r}, which "
                    f"the task does not ask for) is taken from the {where}, not from the task"
                )
                break
        if len(ev) >= MAX_EVIDENCE:
            break
    return ev


def _instructs(o: Output, words: str, policy: Policy) -> bool:
    """Is the value, in this output, inside a sentence that instructs the agent?"""
    low = o.lower
    found = False
    for sentence in _SENTENCE.split(low):
        if f" {words} " not in word_line(sentence):
            continue
        found = True
        cues = (policy.obligation_cues, policy.override_cues)
        if _PASS_ON.search(sentence) or any(c is not None and c.search(sentence) for c in cues):
            return True
    return not found  # split across sentences: not plainly data


def _consulted(o: Output, ctx: CallContext, policy: Policy) -> bool:
    """Did the task tell the agent to make the call that produced `o`?"""
    asked = o.arg_tokens & ctx.task_tokens - STOP_WORDS
    if any(len(w) >= 3 or w.isdigit() for w in asked):
        return True
    return task_wants(ctx, policy, o.tool, o.server)


def sanctioned(value: str, ctx: CallContext, policy: Policy) -> bool:
    """Is an entity the task does not name one the task told the agent to look up?"""
    if not ctx.untrusted.outputs or not change_words(ctx.call.tool, policy):
        return False  # a query's entity (a ticker) from a result is the result's choice
    words = _words_of_value(value)
    if not words:
        return False
    if any(f" {words} " in o.words and delegated(o, ctx, policy) for o in ctx.untrusted.outputs):
        return True  # the document the task orders carried out gives it
    if not task_asks_change(ctx, policy):
        return False
    return any(
        f" {words} " in o.words and _consulted(o, ctx, policy) and not _instructs(o, words, policy)
        for o in ctx.untrusted.outputs
    )
