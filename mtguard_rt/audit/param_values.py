"""What `out-of-scope-param` knows about data: the policy's kinds compiled (what a parameter
may ask for, the task words that ask for it, the tool jobs that need it) and `CallValues`,
the carriers that tell what a value holds (a copy or retelling of the conversation, the
session's tools, a secret or token, a system prompt, personal details) and the consent
that explains it. Pure; compiled once per policy (a bad pattern: `SpecError` with its key).
"""

from __future__ import annotations

import itertools
import math
import re
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from .context import CallContext
from .names import words_of
from .policy import Policy, SpecError, scoped
from .provenance import STOP_WORDS
from .secrets import find_secrets
from .spec import OutOfScopeParamSpec, ParamKindSpec

RULE = "out-of-scope-param"
CARRIERS = frozenset(
    {"conversation", "tools", "credential", "token", "password", "card", "prompt", "personal"}
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TURN = re.compile(r"(?im)^\s*(user|assistant|system|human|ai|model)\s*:")
_EMAIL = re.compile(r"[^@\s<>()\[\],;:\"']+@[^@\s<>()\[\],;:\"']+\.[A-Za-z]{2,}")
# Token-shaped runs: long, no spaces, letters and digits mixed (keys, session ids, JWTs).
_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-+/=.~]{15,}")
_JWT = re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9_\-+/=.~]{12,}")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_PASSWORD = re.compile(r"\S{8,64}")
MIN_PASSWORD_CLASSES = 3  # of lower case, upper case, digits, symbols: "Qx7!mVt2pL9w" has 4
MIN_ENTROPY = 3.0  # bits per character of a token-shaped run (English words score lower)
MIN_SWITCHES = 4  # letter/digit alternations in it ("a1b2c3..."; "report-2026-10" has 2)
MIN_PERSONAL_CHARS = 6  # the shortest value that counts as the user's words copied
MIN_RETOLD_WORDS = 6  # a retelling shares at least this many of the task's content words,
RETOLD_SHARE = 0.6  # and at least this share of them (a short quote shares a few)
MIN_KEY_WORD = 3  # letters of a parameter name's word that a task's clause must say
# what ends a clause of the task: a sentence's end (not a dot inside an address), a dash
_TASK_CLAUSE = re.compile(r"[.;!?]+(?:\s|$)|\n|\s[\u2014\u2013-]+\s")


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _forms(word: str) -> set[str]:
    return {word, word + "s", word[:-1] if word.endswith("s") else word}


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    params: tuple[frozenset[str], ...]
    joined: frozenset[str]
    carriers: frozenset[str]
    task_words: tuple[tuple[str, ...], ...]
    job_words: frozenset[str]

    excepted: tuple[frozenset[str], ...] = ()

    def asks(self, key_words: frozenset[str]) -> bool:
        if any(p <= key_words for p in self.excepted):
            return False
        return any(p <= key_words for p in self.params) or not self.joined.isdisjoint(key_words)

    def described(self, tokens: frozenset[str]) -> bool:
        """Does a description sentence name this kind of data (any inflection: tools/tool)?"""
        return any(all(_forms(w) & tokens for w in p) for p in self.params)


@dataclass(frozen=True, slots=True)
class Compiled:
    kinds: tuple[Kind, ...]
    self_words: frozenset[str]
    copy_min_words: int
    min_tool_names: int
    prompt: re.Pattern[str] | None
    disclosure: re.Pattern[str] | None
    disclosure_task_words: tuple[tuple[str, ...], ...]
    phone: re.Pattern[str] | None


_WHERE = ("rules", RULE)
_cache: weakref.WeakKeyDictionary[Policy, Compiled] = weakref.WeakKeyDictionary()


def _any(patterns: list[str], key: str) -> re.Pattern[str] | None:
    for i, p in enumerate(patterns):
        try:
            re.compile(p)
        except re.error as exc:
            raise SpecError((*_WHERE, key, i), f"invalid regular expression {p!r}: {exc}") from exc
    return re.compile("|".join(scoped(p) for p in patterns)) if patterns else None


def _kind(i: int, k: ParamKindSpec) -> Kind:
    unknown = set(k.carriers) - CARRIERS
    if unknown:
        raise SpecError((*_WHERE, "kinds", i, "carriers"), f"unknown carriers {sorted(unknown)}")
    params = tuple(frozenset(words(p)) for p in k.params if words(p))
    return Kind(
        name=k.name,
        params=params,
        joined=frozenset("".join(words(p)) for p in k.params if len(words(p)) > 1),
        carriers=frozenset(k.carriers),
        task_words=tuple(tuple(words(w)) for w in k.task_words if words(w)),
        job_words=frozenset(w.lower() for w in k.job_words),
        excepted=tuple(frozenset(words(p)) for p in k.except_params if words(p)),
    )


def compiled(policy: Policy) -> Compiled:
    """The rule's lists compiled once per policy (a bad pattern: `SpecError` with its key)."""
    got = _cache.get(policy)
    if got is None:
        spec: OutOfScopeParamSpec = policy.spec.rules.out_of_scope_param
        phone = None
        if spec.phone_pattern:
            phone = _any([spec.phone_pattern], "phone_pattern")
        got = Compiled(
            kinds=tuple(_kind(i, k) for i, k in enumerate(spec.kinds)),
            self_words=frozenset(w.lower() for w in spec.self_words),
            copy_min_words=max(2, spec.copy_min_words),
            min_tool_names=max(1, spec.min_tool_names),
            prompt=_any(spec.prompt_patterns, "prompt_patterns"),
            disclosure=_any(spec.disclosure_patterns, "disclosure_patterns"),
            disclosure_task_words=tuple(
                tuple(words(w)) for w in spec.disclosure_task_words if words(w)
            ),
            phone=phone,
        )
        _cache[policy] = got
    return got


def snip(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _redacted(value: str) -> str:
    """A prefix and the length, never the whole value (verdicts and logs keep it)."""
    return f"{value[: min(6, len(value) // 4)]!r}... ({len(value)} chars)"


def has_phrase(words: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    if n == 1:
        w = phrase[0]
        return any(x == w or x == w + "s" or x == w + "es" for x in words)
    return any(tuple(words[i : i + n]) == phrase for i in range(len(words) - n + 1))


def _copied(value_words: list[str], source: list[str], n: int) -> int:
    """The longest run (at least `n` words, else 0) of `source` copied into the value; the
    whole source counts when it is shorter than `n` but at least 3 words."""
    if len(source) < 3 or len(value_words) < min(n, len(source)):
        return 0
    if len(source) < n:
        n = len(source)
    grams = {tuple(source[i : i + n]) for i in range(len(source) - n + 1)}
    best = run = 0
    for i in range(len(value_words) - n + 1):
        if tuple(value_words[i : i + n]) in grams:
            run = n if run == 0 else run + 1
            best = max(best, run)
        else:
            run = 0
    return best


def card_number(text: str) -> str | None:
    """A payment card number in `text`: 13 to 19 digits (spaces or dashes between groups
    allowed) whose Luhn check digit is right, else None."""
    for m in _CARD.finditer(text):
        digits = [int(c) for c in m.group(0) if c.isdigit()]
        total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2)
                    for i, d in enumerate(reversed(digits)))  # fmt: skip
        if total % 10 == 0 and len(set(digits)) > 1:
            return m.group(0)
    return None


def _password_shaped(text: str) -> str | None:
    """A value that looks like a password: one run of 8 to 64 characters without spaces,
    holding a letter, a digit and at least `MIN_PASSWORD_CLASSES` of the four character
    classes; not a path, an address or a URL."""
    text = text.strip()
    if not _PASSWORD.fullmatch(text) or "/" in text or "@" in text or "://" in text:
        return None
    classes = [
        any(c.islower() for c in text),
        any(c.isupper() for c in text),
        any(c.isdigit() for c in text),
        any(not c.isalnum() for c in text),
    ]
    if not (classes[2] and (classes[0] or classes[1])) or sum(classes) < MIN_PASSWORD_CLASSES:
        return None
    return text


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(c / len(text) * math.log2(c / len(text)) for c in counts.values())


def _token_shaped(text: str) -> str | None:
    """A run that looks like a key, token or session id, else None."""
    if m := _JWT.search(text) or _BEARER.search(text):
        return m.group(0)
    for m in _RUN.finditer(text):
        run = m.group(0)
        letters = sum(c.isalpha() for c in run)
        digits = sum(c.isdigit() for c in run)
        if letters < 3 or digits < 3 or run.count("/") > 1:
            continue  # a word, a number, a path
        switches = sum(
            1
            for a, b in itertools.pairwise(run)
            if a.isalpha() != b.isalpha() and a.isalnum() and b.isalnum()
        )
        if switches >= MIN_SWITCHES and _entropy(run) >= MIN_ENTROPY:
            return run
    return None


class CallValues:
    """What the carriers compare a value with, computed once per call."""

    def __init__(self, ctx: CallContext, policy: Policy, rc: Compiled) -> None:
        self.ctx, self.policy, self.rc = ctx, policy, rc
        self.task_lower = (ctx.task_text or "").lower()
        self.task_words = words(ctx.task_text or "")
        self.sources: list[tuple[str, list[str]]] = [("the task", words(ctx.task or ""))]
        for i, m in enumerate(ctx.history):
            role = str(m.get("role", "")) or "a"
            self.sources.append((f"{role} turn {i + 1}", words(str(m.get("content", "")))))
        names = {n for ns in ctx.tools_by_server.values() for n in ns if len(n) >= 4}
        self.tool_names = sorted(names, key=len, reverse=True)
        self.servers = sorted(ctx.tools_by_server, key=len, reverse=True)

    @cached_property
    def tool_patterns(self) -> list[tuple[str, re.Pattern[str]]]:
        """Each session tool in any spelling of its words: read_note, readNote, read note."""
        return [
            (n, re.compile(rf"(?<![\w]){'[ _.-]?'.join(map(re.escape, words_of(n)))}(?![\w])"))
            for n in self.tool_names
            if words_of(n)
        ]

    def carries(self, value: str, carriers: frozenset[str]) -> list[str]:
        """What of `carriers` the value shows, in words for the evidence."""
        out: list[str] = []
        if "conversation" in carriers:
            out += self._conversation(value)
        if "tools" in carriers and (named := self._tools(value)):
            if len(named) >= self.rc.min_tool_names:
                out.append(f"names {len(named)} of the session's tools ({', '.join(named[:4])})")
        if "credential" in carriers:
            if found := find_secrets(value):
                out.append(f"secret material ({found[0].describe()})")
            elif self.policy.secrets is not None and (m := self.policy.secrets.search(value)):
                out.append(f"secret material {_redacted(m.group(0))}")
        if "token" in carriers and not any(o.startswith("secret material") for o in out):
            if tok := _token_shaped(value):
                out.append(f"a token-shaped value {_redacted(tok)}")
        if "password" in carriers and not out and (pw := _password_shaped(value)):
            out.append(f"a password-shaped value {_redacted(pw)}")
        if "card" in carriers and (card := card_number(value)):
            out.append(f"a payment card number (Luhn-valid, {_redacted(card)})")
        if "prompt" in carriers and self.rc.prompt is not None:
            if m := self.rc.prompt.search(value):
                out.append(f"a system prompt's text {snip(m.group(0))}")
        if "personal" in carriers and not any(o.startswith("a payment card") for o in out):
            out += self._personal(value)  # a card's digits are no phone number
        return out

    def _conversation(self, value: str) -> list[str]:
        out: list[str] = []
        if len(_TURN.findall(value)) >= 1 and len(value.split()) > 3:
            out.append("conversation turns (user:/assistant: lines)")
        vw = words(value)
        for where, source in self.sources:
            if (n := _copied(vw, source, self.rc.copy_min_words)) > 0:
                whole = " (all of it)" if n >= len(source) else ""
                out.append(f"{n} words copied from {where}{whole}")
                return out
        # a retelling: most of what the task says, in other words
        said = {w for w in self.sources[0][1] if w not in STOP_WORDS and len(w) > 2}
        shared = said & set(vw)
        if len(shared) >= MIN_RETOLD_WORDS and len(shared) >= RETOLD_SHARE * len(said):
            out.append(f"a retelling of the task ({len(shared)} of its {len(said)} words)")
        return out

    def _tools(self, value: str) -> list[str]:
        low = value.lower()
        named = [n for n, rx in self.tool_patterns if rx.search(low)]
        named += [
            f"{s}.*"
            for s in self.servers
            if re.search(rf"(?<![\w.]){re.escape(s.lower())}\.(\*|[a-z_])", low)
        ]
        return named

    def _personal(self, value: str) -> list[str]:
        out: list[str] = []
        if self.rc.phone is not None and (m := self.rc.phone.search(value)):
            if sum(c.isdigit() for c in m.group(0)) >= 9:
                out.append(f"a phone number {snip(m.group(0))}")
        if emails := _EMAIL.findall(value):
            out.append(f"{len(emails)} e-mail address(es) ({', '.join(emails[:3])})")
        text = " ".join(value.split()).lower()
        task = " ".join(self.task_lower.split())
        if not out and len(text) >= MIN_PERSONAL_CHARS and len(words(text)) >= 2:
            if text in task:
                out.append(f"the user's own words from the task {snip(value)}")
            else:  # a list of what the user mentioned: "Ana Reis, Bruno Costa"
                items = [i.strip() for i in re.split(r"[,;\n]|\band\b", text) if i.strip()]
                if len(items) >= 2 and all(len(i) >= 3 and i in task for i in items):
                    out.append(f"{len(items)} names or details the user mentioned {snip(value)}")
        return out

    def placed(self, key_words: tuple[str, ...], value: str) -> str | None:
        """The user typed this very value in the task, in a clause that names the parameter
        by a word of its name ("put her number +351 ... in the contact field" for
        `contact_phone`): the user chose what fills it. A value the task only holds (a
        signature, a pasted mail) is not placed, nor is one the parameter names only by the
        words that call it the user's own (`requester_phone`)."""
        text = " ".join(value.split()).lower()
        named = {w for w in key_words if w not in self.rc.self_words and len(w) >= MIN_KEY_WORD}
        if len(text) < MIN_PERSONAL_CHARS or not named:
            return None
        for clause in _TASK_CLAUSE.split(self.task_lower):
            if text in " ".join(clause.split()) and named & {
                f for w in words(clause) for f in _forms(w)
            }:
                return "the task puts this value in this parameter"
        return None

    def consent(self, kind: Kind, key_words: tuple[str, ...]) -> str | None:
        """Why the task or the tool's job explains this kind of data here, else None."""
        for phrase in kind.task_words:
            if has_phrase(self.task_words, phrase):
                return f"the task says {' '.join(phrase)!r}"
        if key_words and has_phrase(self.task_words, key_words):
            return "the task names the parameter"
        if self.rc.self_words.isdisjoint(key_words):
            job = set(words_of(self.ctx.call.tool)) & kind.job_words
            if job:
                return f"the tool's name says its job ({', '.join(sorted(job))})"
        return None
