"""`out-of-scope-param`: a parameter asks for data the tool's job does not need, and the call
hands it over (pre-execution, pure).

Three questions, none answered from a server's or a tool's literal name:
1. what a parameter asks for: its name's words against the policy's kinds (`conversation`,
   `user_request`, `system_prompt`, `tool_list`, `session_token`, `requester_phone`, ...),
   and what the tool's description defines it as (both: `session_notes` "paste the full
   conversation"); a value among the schema's own `enum` options is a declared choice;
2. what the value carries: text copied from the task or history beyond a short quote, or
   written as transcript turns; the names of the session's tools; a secret (`secrets`'
   detector, the policy's `secret_patterns`) or, where the kind allows it, any token-shaped
   value, a password-shaped one (a password parameter), a Luhn-valid card number (a card
   parameter, even as bare digits); a system prompt's text; the user's phone, e-mail or words;
3. whether the task asks for that data to go to a tool (the kind's task words: "my phone",
   "log in with this token", "the conversation"), or the tool's declared job needs it (its
   name's words: `login`, `add_contact`; never for data the parameter calls the user's or
   the agent's own, `requester_phone`); or the user typed the value itself in a clause of
   the task that names the parameter ("put her number +351 ... in the contact field").
(1)+(2) and not (3) denies; (1) alone is recorded (observe). In any argument, whatever its
name, a system prompt written out under its label is (1)+(2) at once.
"""

from __future__ import annotations

import re
from typing import Any

from ..model import Violation
from .context import CallContext
from .names import words_of
from .param_values import (
    RULE,
    CallValues,
    Compiled,
    Kind,
    card_number,
    compiled,
    has_phrase,
    snip,
    words,
)
from .policy import Policy
from .text import leaf_key

__all__ = ["RULE", "compiled", "out_of_scope_param"]
MAX_EVIDENCE = 10


def _declared_choice(schema: dict[str, Any], key: str, value: str) -> bool:
    top = re.split(r"[.\[]", key, maxsplit=1)[0]
    prop = (schema.get("properties") or {}).get(top)
    enum = prop.get("enum") if isinstance(prop, dict) else None
    return isinstance(enum, list) and value in enum


def _key_words(key: str) -> list[tuple[str, ...]]:
    """The words of a key path's leaf and of its top-level key (`contacts[0].email`)."""
    parts = [p for p in re.split(r"[.\[\]]", key) if p and not p.isdigit()]
    names = dict.fromkeys([parts[-1], parts[0]] if parts else [])
    return [words_of(n) for n in names]


def _asked(
    ctx: CallContext, rc: Compiled, key: str
) -> list[tuple[tuple[str, ...], str, list[Kind]]]:
    """The kinds of data an argument's parameter asks for: by its name (the leaf's or the
    top-level key's words), and by what the tool's own (untrusted) description defines
    the parameter as ("notes: paste the full conversation"): an attacker who wants a
    parameter filled must say with what, whatever the name says."""
    names = _key_words(key)
    out: list[tuple[tuple[str, ...], str, list[Kind]]] = []
    for ordered in names:
        words = frozenset(ordered)
        kinds = [k for k in rc.kinds if k.asks(words)]
        if kinds:
            out.append((ordered, "by its name", kinds))
            break
    info = ctx.untrusted.tool(ctx.call.server, ctx.call.tool)
    if info is None or not names:
        return out
    leaf = leaf_key(key).lower()
    seen = {k.name for _, _, kinds in out for k in kinds}
    for sentence in info.sentences:
        for definition in _definitions(sentence.text, leaf):
            kinds = [k for k in rc.kinds if k.described(_token_set(definition))]
            kinds = [k for k in kinds if k.name not in seen]
            if kinds:  # what the description defines it as, beside what its name says
                return [*out, (names[0], f"its description: {snip(definition, 80)}", kinds)]
    return out


def _token_set(text: str) -> frozenset[str]:
    return frozenset(words(text))


def _definitions(text: str, name: str) -> list[str]:
    """What a description says a parameter is: the text after `name:` (or `name -`,
    `name =`, "`name` is/should be/must contain/lists", the name perhaps quoted) up to the
    next `;`, full stop or the next parameter's definition. A parameter merely mentioned
    ("XML context in old_string") has none."""
    head = rf"(?<![\w`'\"])[`'\"]?{re.escape(name)}[`'\"]?"
    rx = re.compile(
        rf"{head}\s*(?::|=|\s-\s|\s(?:is|are|should be|must be|must contain|contains|"
        rf"expects?|takes?|lists|holds|carries)\b)\s*(?P<body>[^;.\n]{{3,300}})",
        re.I,
    )
    out = []
    for m in rx.finditer(text):
        body = re.split(r"\b[A-Za-z_][\w]*\s*:\s", m.group("body"), maxsplit=1)[0]
        out.append(body.strip())
    return out


def out_of_scope_param(ctx: CallContext, policy: Policy) -> list[Violation]:
    rc = compiled(policy)
    call = CallValues(ctx, policy, rc)
    deny: list[str] = []
    weak: list[str] = []
    tool = ctx.call.tool
    for key, value in ctx.arg_items:
        text = value.strip()
        if not text or re.fullmatch(r"[-+]?\d+(\.\d+)?|true|false|null", text, re.I):
            if not (text and card_number(text)):  # a number, unless a card's
                continue
        if _declared_choice(ctx.input_schema, key, value):
            continue
        asked = False
        for ordered, how, kinds in _asked(ctx, rc, key):
            asked = True
            if call.placed(ordered, value) is not None:
                continue  # the user typed the value for this very parameter
            for kind in kinds:
                if call.consent(kind, ordered) is not None:
                    continue
                if carried := call.carries(value, kind.carriers):
                    deny.append(
                        f"argument {key!r} asks for {kind.name} ({how}) and carries "
                        f"{'; '.join(carried)}; the task does not ask for {kind.name} to go "
                        f"to {tool!r}"
                    )
                else:
                    weak.append(
                        f"argument {key!r} asks for {kind.name} ({how}); its value "
                        f"{snip(value, 40)} shows none of it (recorded only)"
                    )
        if not asked and rc.disclosure is not None and (m := rc.disclosure.search(value)):
            if not any(has_phrase(call.task_words, p) for p in rc.disclosure_task_words):
                deny.append(
                    f"argument {key!r} writes out the agent's system prompt {snip(m.group(0))}; "
                    "the task does not ask for it"
                )
    if deny:
        reason = "an argument hands over data the tool's job does not need"
        return [_violation(policy, reason, deny + weak, policy.mode_of(RULE))]
    if weak:
        reason = "a parameter asks for data the tool's job does not need (its value carries none)"
        return [_violation(policy, reason, weak, "observe")]
    return []


def _violation(policy: Policy, reason: str, evidence: list[str], mode: Any) -> Violation:
    if policy.mode_of(RULE) == "observe":
        mode = "observe"
    return Violation(
        rule=RULE, phase="pre", mode=mode, reason=reason, evidence=evidence[:MAX_EVIDENCE]
    )
