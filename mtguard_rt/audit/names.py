"""Confusable tool names: a skeleton that folds case, separators and look-alike characters.

Two names are confusable when their skeletons are equal (`Read-File`, `read_file`,
`re\u0430d_file` with a Cyrillic a, `read_fi1e`) or within a small edit distance. A name
*captures* another when it is that name plus a persuasive affix (`send_email_v2`,
`secure_send_email`), built to win the model's choice over the original.

An *identical* name on two servers is a collision, not by itself shadowing: generic names
(`list_events` of a calendar and of a chat channel) recur across servers. It shadows when a
description competes for the name's calls (`COMPETES`: "the official", "use this one",
"instead of the other", "drop-in replacement") or when the descriptions do not tell the two
jobs apart (`tells_apart`: each says what its tool acts on in words the other does not).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Look-alikes NFKC does not fold (Cyrillic, Greek, Latin variants, digits and symbols),
# written as escapes so the source itself is unambiguous.
_LOOKALIKE = (
    "\u0430\u0432\u0435\u0451\u043a\u043c\u043d\u043e\u0440\u0441\u0442\u0443"
    "\u0445\u0455\u0456\u0457\u0458\u0501\u0261\u051b\u051d\u03b1\u03b2\u03b5"
    "\u03b7\u03b9\u03ba\u03bd\u03bf\u03c1\u03c4\u03c5\u03c7\u03c9\u0131\u0142"
    "01345789|!$@"
)
_PLAIN = "abeekmhopctyxsiijdgqwabenikvoptuxwiloleastbglisa"
_HOMOGLYPHS = str.maketrans(_LOOKALIKE, _PLAIN)
_SEPARATORS = re.compile(r"[\s_\-.:/\\]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@lru_cache(maxsize=4096)
def skeleton(name: str) -> str:
    """The name as a reader would perceive it: folded, separator-free, homoglyphs mapped."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = _SEPARATORS.sub("", text.lower().translate(_HOMOGLYPHS))
    text = text.replace("rn", "m").replace("vv", "w").replace("cl", "d")
    return text.replace("i", "l")


@lru_cache(maxsize=4096)
def words_of(name: str) -> tuple[str, ...]:
    """The words of an identifier: `sendEmail_v2` -> ['send', 'email', 'v2']."""
    text = _CAMEL.sub(" ", unicodedata.normalize("NFKC", name))
    return tuple(w for w in _SEPARATORS.split(text.lower()) if w)


def edit_distance(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein (optimal string alignment) distance, capped at limit + 1."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, start=1):
            cost = 0 if ca == cb else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def confusable(a: str, b: str, max_distance: int, min_length: int) -> str | None:
    """Why `a` and `b` can be mistaken for each other, or None."""
    if a == b:
        return "identical name"
    sa, sb = skeleton(a), skeleton(b)
    if sa == sb:
        if a.lower() == b.lower():
            return "differs only in case"
        if _SEPARATORS.sub("", a.lower()) == _SEPARATORS.sub("", b.lower()):
            return "differs only in separators"
        return "look-alike characters"
    if min(len(sa), len(sb)) >= min_length:
        d = edit_distance(sa, sb, max_distance)
        if d <= max_distance:
            return f"edit distance {d}"
    return None


# A description competing for another tool's calls: precedence, replacement, disparagement.
COMPETES = re.compile(
    r"\b(official|verified|certified|preferred|recommended|authoritative|canonical|genuine|"
    r"always use|use this|use only|only use|prefer|instead|rather than|in place of|"
    r"replac\w*|drop-in|supersed\w*|deprecated|obsolete|legacy|do not use|don'?t use|"
    r"never use|the other|any other|other \w+ tools?|most (accurate|reliable|secure|trusted)|"
    r"insecure|unreliable|broken)\b",
    re.I,
)
_DESC_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
MIN_DISTINCT_WORDS = 2  # words a description must say that the other does not
MIN_ABBREV, MAX_ABBREV = 2, 4  # letters of a word that may abbreviate another


def _content(description: str, name: str, drop: frozenset[str]) -> frozenset[str]:
    named = {stem(w) for w in words_of(name)}
    return frozenset(
        stem(w) for w in _DESC_WORD.findall(description.lower())
        if w not in drop and stem(w) not in named
    )


def tells_apart(a: str, b: str, name: str, drop: frozenset[str]) -> bool:
    """Do two descriptions of one tool name say different jobs: each has `MIN_DISTINCT_WORDS`
    content words (not the name's, not in `drop`) the other lacks? A copy, a copy plus
    extras, or a description saying nothing beyond the name ("Look up a login.") does not."""
    ca, cb = _content(a, name, drop), _content(b, name, drop)
    return len(ca - cb) >= MIN_DISTINCT_WORDS and len(cb - ca) >= MIN_DISTINCT_WORDS


def captures(name: str, other: str, affixes: frozenset[str]) -> bool:
    """True when `name` is `other` plus only persuasive affix words (either end)."""
    mine, theirs = words_of(name), words_of(other)
    if not theirs or len(mine) <= len(theirs):
        return False
    target = [skeleton(w) for w in theirs]
    folded = [skeleton(w) for w in mine]
    n = len(target)
    for start in range(len(folded) - n + 1):
        if folded[start : start + n] == target:
            extra = (*mine[:start], *mine[start + n :])
            return all(w in affixes for w in extra)
    return False


_SUFFIXES = (("ation", "at"), ("ator", "at"), ("ing", ""), ("er", ""), ("or", ""), ("ed", ""),
             ("e", ""))


@lru_cache(maxsize=4096)
def stem(word: str) -> str:
    """A crude English stem, the same for a name's and a task's words: plurals and common
    suffixes go (`prices` -> `pric`, `navigator`/`navigate`/`navigation` -> `navigat`)."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is", "ws")):
        w = w[:-1]
    for suffix, repl in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 4:
            return w[: len(w) - len(suffix)] + repl
    return w


@lru_cache(maxsize=4096)
def meaning(name: str, drop: frozenset[str]) -> frozenset[str]:
    """The stems of a tool name's words, minus the words in `drop` (generic verbs, fillers,
    praise, the server's common prefix): what the name says the tool does."""
    return frozenset(stem(w) for w in words_of(name) if w not in drop and stem(w) not in drop)


@lru_cache(maxsize=256)
def common_words(names: tuple[str, ...], share: float = 0.5, least: int = 5) -> frozenset[str]:
    """Words in more than `share` of a server's tool names (`playwright_` on every tool of a
    browser server): they say which server, not what the tool does. Needs `least` names."""
    if len(names) < least:
        return frozenset()
    counts: dict[str, int] = {}
    for n in names:
        for w in set(words_of(n)):
            counts[w] = counts.get(w, 0) + 1
    return frozenset(w for w, c in counts.items() if c > share * len(names))


def synonym_groups(groups: list[list[str]]) -> dict[str, frozenset[int]]:
    """Each word's stem -> the indexes of the groups it is in (a word may name two jobs:
    `email` sends and is a message)."""
    out: dict[str, set[int]] = {}
    for i, group in enumerate(groups):
        for w in group:
            out.setdefault(stem(w), set()).add(i)
    return {k: frozenset(v) for k, v in out.items()}


def same_word(a: str, b: str, synonyms: dict[str, frozenset[int]]) -> bool:
    """Do two stems say the same thing: equal, or in one synonym group?"""
    return a == b or not synonyms.get(a, frozenset()).isdisjoint(synonyms.get(b, frozenset()))


def abbreviates(a: str, b: str) -> bool:
    """Is the short word `a` an abbreviation of `b` (`msg` of message, `cfg` of config,
    `img` of image): its letters in order in `b`, from `b`'s first one?"""
    if not MIN_ABBREV <= len(a) <= MAX_ABBREV or len(b) < len(a) + 2 or a[0] != b[0]:
        return False
    rest = iter(b[1:])
    return all(c in rest for c in a[1:])


def kin(a: str, b: str, synonyms: dict[str, frozenset[int]]) -> bool:
    """`same_word`, or one stem abbreviates the other (tool names shorten words)."""
    return same_word(a, b, synonyms) or abbreviates(a, b) or abbreviates(b, a)


def covered(small: frozenset[str], big: frozenset[str], syn: dict[str, frozenset[int]]) -> bool:
    """Does every stem of `small` have a same-meaning stem (`kin`) in `big`?"""
    return all(any(kin(a, b, syn) for b in big) for a in small)
