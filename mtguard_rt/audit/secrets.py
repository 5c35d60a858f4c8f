"""One secrets detector for every rule that reads untrusted text for credentials.

`find_secrets(text)` returns `Finding`s: self-identifying credential formats (private key
blocks, AWS/GCP/Azure keys, GitHub/GitLab/Slack/Stripe/npm/PyPI/OpenAI/Anthropic tokens,
JWTs), credentials in URLs (`scheme://user:pass@host`) and credential assignments
(`password=...`, `"api_key": "..."`, `token: ...`) whose value looks real (no placeholder,
mixed characters). A bare high-entropy string (a hash, a UUID, a git SHA, a base64 image) is
never a finding. Each is also found in base64 and hex payloads, split into groups (joined
by spaces, dashes or newlines) and in the decoded views of `decode.views` (zero-width
characters removed, url and quoted-printable decoded, line-broken base64 joined); the
self-identifying formats alone also reversed and ROT13-encoded (a look-alike there is
implausible; an assignment or a netrc line is not). netrc `login x password y` lines are
assignments. The format table and its anchored matcher are in `secret_formats`. Pure;
bounded by `MAX_SCAN_CHARS` per text (`decode.MAX_VIEW_CHARS` for the views).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .decode import b64_forms, find_known, rot13, views
from .secret_formats import FORMATS, MAX_ANCHORS, at_anchors
from .text import decoded_variants, iter_strings, leaf_key

MAX_SCAN_CHARS = 2 * 1024 * 1024  # per text: its head and tail (half each) beyond this
MAX_DECODE_CHARS = 256 * 1024  # per text: base64/hex payloads and split tokens looked for this far
MAX_FINDINGS = 20  # per text
MIN_VALUE = 8  # shortest secret value worth tracking

MAX_SPLIT_CHECKS = 16  # candidate split tokens looked up in the original text


def _cases(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(v for w in words for v in (w, w.capitalize(), w.upper()))


# scheme://user:password@host (a token alone as the user part is a format above)
_URL_CRED = re.compile(
    r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,15}://([^\s:/?#@'\"<>`]{1,64}):([^\s/?#@'\"<>`]{1,128})@[\w.-]+"
)

# An assignment whose key names a credential: `password=x`, `"api_key": "x"`, `Token: x`. Found
# from each occurrence of an anchor word: back to the key's start, then one anchored match.
_KEY_WORD = re.compile(
    r"(?i)password|passwd|passphrase|pwd|secret|token|api[_ -]?key|apikey|access[_ -]?key"
    r"|private[_-]?key|client[_-]?secret|auth[_-]?key|account[_-]?key|signing[_-]?key"
    r"|encryption[_-]?key|master[_-]?key|credentials?"
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_ASSIGN = re.compile(
    r"(?i)([\"']?)([A-Za-z0-9_.-]{1,64}|api key|access key|secret key)\1"
    r"[ \t]*(?:=>|:=|=|:|\s+is:?)[ \t]*([\"']?)([^\s\"'`,;<>)\]}]{" + str(MIN_VALUE) + ",200})"
)
_AFTER_KEY = re.compile(r"[\w.-]*[\"']?[ \t]*(?:=|:|is\b)")
_ASSIGN_WORDS = ("pass", "pwd", "secret", "token", "key", "credential")
_ASSIGN_ANCHORS = _cases(_ASSIGN_WORDS)
# Words of a key that name something about a credential, not the credential itself.
_NOT_VALUE_WORDS = frozenset(
    "count max min type len length limit size name names id ids usage used expires expiry "
    "expiration ttl url uri path file dir field hint policy prompt label header hash digest "
    "checksum fingerprint sha format prefix kind scope endpoint env var variable ref version "
    "required enabled optional rotation rotated issued created updated at lifetime".split()
)
_PLACEHOLDER = re.compile(
    r"(?i)example|your|x{4}|\*{3}|changeme|change[_-]me|placeholder|redacted|dummy|sample"
    r"|replace|insert|fake|todo|tbd|here|secret|password|token|<|>|\{|\}|\$|%|\.\.\.|…|^none$"
    r"|^null$|^undefined$|^true$|^false$"
)
_CODE_REF = re.compile(r"(?i)^(?:process\.env|os\.environ|env\.|getenv|self\.|this\.|config\.)|\(")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DIGIT = re.compile(r"\d")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}")
# a netrc entry: machine (or default), login, password (the value is its own token)
_NETRC = re.compile(
    r"(?<![\w.-])(?:machine[ \t]+\S+|default)[ \t]+(?:login[ \t]+(\S+)[ \t]+)?"
    r"(?:account[ \t]+\S+[ \t]+)?password[ \t]+(\S{" + str(MIN_VALUE) + ",200})"
)
_WS = re.compile(r"\s+")
_WS_DASH = re.compile(r"[\s-]+")
# a value a secret-returning tool hands back: a token of mixed characters
_VALUE_TOKEN = re.compile(r"(?<![\w+/=.~-])[\w+/=.~-]{12,200}(?![\w+/=.~-])")

# Words that mean a credential, in a task (the user asks for one) or a tool's name.
CREDENTIAL_WORDS = re.compile(
    r"(?i)\b(?:passwords?|passwd|passphrases?|secrets?|tokens?|credentials?|creds|api[ _-]?keys?"
    r"|apikeys?|(?:access|secret|private|ssh|deploy|signing|license|encryption|gpg|pgp|cloud"
    r"|aws|service|master|root|session|auth)[ _-]?keys?|key[ _-]?pairs?|keypairs?|jwts?|dsn"
    r"|connection[ _-]strings?|env|environment(?: variables?)?|\.env|logins?|bearer|oauth)\b"
)
_SECRET_TOOL_WORDS = frozenset(
    "secret secrets password passwords passwd passphrase token tokens credential credentials "
    "creds apikey".split()
)
_NAME_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret in a text: its kind, the value, how it was written, the key naming it."""

    kind: str
    value: str
    encoding: str = "plain"  # plain | base64 | hex | split | a `decode` form
    key: str = ""  # the assignment's key or the URL's user, when there is one

    def redacted(self) -> str:
        """A prefix and the length, never the value: safe for verdicts and logs."""
        shown = self.value[: min(4, len(self.value) // 4)]
        return f"{shown!r}... ({len(self.value)} chars)"

    def describe(self) -> str:
        enc = self.encoding
        how = f", {enc}-encoded" if enc in ("base64", "hex", "split") else f" ({enc})"
        how = "" if enc == "plain" else how
        key = f" in {self.key!r}" if self.key and self.kind != "credential in a URL" else ""
        return f"{self.kind}{key} {self.redacted()}{how}"


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _classes(value: str) -> int:
    return (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
        + any(not c.isalnum() for c in value)
    )


def looks_real(value: str) -> bool:
    """Could `value` be a real secret (not a placeholder, a reference, a word or a number)?"""
    if len(value) < MIN_VALUE or _PLACEHOLDER.search(value) or _CODE_REF.search(value):
        return False
    if value.startswith(("/", "./", "~/", "http:", "https:")) or _UUID.match(value):
        return False
    if len(set(value)) < 6:
        return False
    return _classes(value) >= 3 or (_classes(value) == 2 and entropy(value) >= 3.5)


def _format_ok(value: str) -> bool:
    """A format match that is not a placeholder (AKIAIOSFODNN7EXAMPLE, ghp_xxxx...)."""
    if "PRIVATE KEY" in value:  # a key body may hold runs of "A" (zero bytes)
        return len(set(value.rsplit("-----", 1)[-1])) >= 16
    if "EXAMPLE" in value.upper() or re.search(r"(.)\1{7}", value):
        return False
    if value[:7].lower() == "bearer ":
        return looks_real(value[7:].strip())
    return len(set(value)) >= 10


def _formats(text: str, loose: bool = False) -> list[tuple[str, str]]:
    return [
        (kind, m.group(0))
        for kind, anchors, back, rx in FORMATS
        for m in at_anchors(text, anchors, rx, back, loose)
        if _format_ok(m.group(0))
    ]


def formats(text: str) -> list[tuple[str, str]]:
    """(kind, value) of each self-identifying credential format in `text` (no placeholder)."""
    return _formats(text)


def _assignments(text: str) -> list[tuple[str, str]]:
    """(key, value) of each assignment whose key holds a credential word."""
    out: list[tuple[str, str]] = []
    done = -1
    # one search per word in the lower-cased text when it keeps its offsets (ASCII)
    lowered, anchors = (text.lower(), _ASSIGN_WORDS) if text.isascii() else (text, _ASSIGN_ANCHORS)
    for anchor in anchors:
        at, seen = lowered.find(anchor), 0
        while at >= 0 and seen < MAX_ANCHORS:
            seen += 1
            if not _AFTER_KEY.match(text, at):  # prose: "the key and", "tokens are"
                at = lowered.find(anchor, at + 1)
                continue
            start = at
            while start > 0 and at - start < 48 and text[start - 1] in _KEY_CHARS:
                start -= 1
            before = text[max(0, start - 8) : start].lower()
            start -= next((len(w) for w in ("api ", "access ", "secret ") if before.endswith(w)), 0)
            m = None
            if start > done:  # a quoted key ("api_key": ...), else the bare one ("pass=...)
                quoted = start > 0 and text[start - 1] in "\"'"
                m = (_ASSIGN.match(text, start - 1) if quoted else None) or _ASSIGN.match(
                    text, start
                )
            if m is not None and _KEY_WORD.search(m.group(2)):
                out.append((m.group(2), m.group(4)))
                done = m.end()
            at = lowered.find(anchor, at + 1)
    return out


def _plain(text: str, encoding: str) -> list[Finding]:
    found = [Finding(kind, value, encoding) for kind, value in _formats(text)]
    for m in at_anchors(text, ("://",), _URL_CRED, (2, 16), needs="@"):
        user, password = m.group(1), m.group(2)
        if password != user and looks_real(password):
            found.append(Finding("credential in a URL", password, encoding, user))
    for key, value in _assignments(text):
        if _NOT_VALUE_WORDS.intersection(name_words(key)) or not looks_real(value):
            continue
        if any(value in f.value or f.value in value for f in found):
            continue  # a format already found it (token=ghp_...)
        found.append(Finding("credential assignment", value, encoding, key))
    if "password" in text:
        for m in _NETRC.finditer(text):
            if looks_real(m.group(2)) and not any(m.group(2) == f.value for f in found):
                found.append(Finding("netrc password", m.group(2), encoding, m.group(1) or ""))
    return found


def _transformed(text: str) -> list[Finding]:
    """Self-identifying formats in the reversed and the ROT13 text (never assignments)."""
    head = text[:MAX_DECODE_CHARS]
    return [
        Finding(kind, value, enc)
        for enc, view in (("reversed", head[::-1]), ("ROT13", rot13(head)))
        for kind, value in _formats(view)
    ]


def _split(text: str, seen: Iterable[str]) -> list[Finding]:
    """Formats that appear only once spaces/newlines (or also dashes) are removed, and whose
    original spelling cuts them into groups of one length (an encoding, not prose)."""
    out: list[Finding] = []
    known = set(seen)
    joined = "".join(text.split())
    variants = [(_WS, joined)] if len(joined) != len(text) else []
    if "-" in joined:
        variants.append((_WS_DASH, joined.replace("-", "")))
    if not variants or not _DIGIT.search(joined):
        return out  # nothing was split, or nothing token-like (a token holds a digit)
    for squeeze, squeezed in variants:
        for kind, value in _formats(squeezed, loose=True):
            if value in known or value in text or len(known) >= MAX_SPLIT_CHECKS:
                continue
            known.add(value)
            if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
                continue  # prose glued together ("risk-based approach"), not a token
            sep = r"[\s-]*" if squeeze is _WS_DASH else r"\s*"
            spelled = re.search(sep.join(map(re.escape, value)), text)
            if spelled and _grouped(spelled.group(0), squeeze):
                out.append(Finding(kind, value, "split"))
    return out


def _grouped(spelling: str, separators: re.Pattern[str]) -> bool:
    """Are the inner groups of `spelling` (split at its separators) all one length?"""
    groups = [g for g in separators.split(spelling) if g]
    inner = groups[1:-1]
    return len(groups) >= 4 and len({len(g) for g in inner}) == 1 and 2 <= len(inner[0]) <= 12


@lru_cache(maxsize=16)
def find_secrets(text: str) -> tuple[Finding, ...]:
    """Every secret in `text` (plain, in base64/hex payloads, split into groups); cached per
    text, since a result is read by the post rule and the session ledger alike."""
    if len(text) > MAX_SCAN_CHARS:
        half = MAX_SCAN_CHARS // 2
        text = f"{text[:half]}\n{text[-half:]}"
    found = _plain(text, "plain")
    head = text[:MAX_DECODE_CHARS]
    # a payload is a run of 16+ characters: prose without one is not worth decoding
    for enc, decoded in decoded_variants(head) if any(len(w) >= 16 for w in head.split()) else ():
        found += [f for f in _plain(decoded, enc) if not any(f.value == g.value for g in found)]
    for enc, view in views(text):
        found += [f for f in _plain(view, enc) if not any(f.value == g.value for g in found)]
    found += [f for f in _transformed(text) if not any(f.value == g.value for g in found)]
    if len(found) < MAX_FINDINGS:
        found += _split(text[:MAX_DECODE_CHARS], (f.value for f in found))
    return tuple(found[:MAX_FINDINGS])


def carries(text: str, value: str) -> str | None:
    """How `text` carries all of `value`: "plain", "base64", "hex", "split" (its characters
    in order with only spaces/dashes between), or another `decode` form; or None."""
    found = find_known(text, value, MIN_VALUE, partial=False)
    return found[0] if found is not None else None


def asks_for_credentials(text: str | None) -> str | None:
    """The credential word in `text` (a task), if any: the user asks about a secret."""
    m = CREDENTIAL_WORDS.search(text or "")
    return m.group(0) if m else None


def name_words(name: str) -> list[str]:
    """Lower-case words of an identifier: get_secret, getApiKey, list-tokens."""
    return [w.lower() for w in _NAME_WORDS.findall(name)]


def secret_tool(name: str) -> bool:
    """Does a tool's name say its job is handing out a secret (get_secret, create_token)?"""
    words = name_words(name)
    pairs = {a + b for a, b in itertools.pairwise(words)}
    return bool(_SECRET_TOOL_WORDS.intersection(words) or "apikey" in pairs)


def tool_values(text: str) -> tuple[Finding, ...]:
    """What a secret-returning tool's result holds that could be the secret: tokens of mixed
    characters (letters and digits, 12+), not a UUID; bounded by `MAX_FINDINGS`."""
    out = []
    for m in _VALUE_TOKEN.finditer(text[:MAX_DECODE_CHARS]):
        value = m.group(0)
        has_digit = any(c.isdigit() for c in value)
        if _DATE.search(value) or len(set(value)) < 10:
            continue  # a timestamp, a version, a short id
        if has_digit and any(c.isalpha() for c in value) and looks_real(value):
            out.append(Finding("value of a secret-returning tool", value))
            if len(out) >= MAX_FINDINGS:
                break
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Sighting:
    """A secret that reached the agent in a result: which server and tool it came from."""

    server: str
    tool: str
    kind: str
    value: str


_NOT_TEXT = frozenset({"type", "mimeType"})


def result_secrets(tool: str, result: Any) -> list[tuple[str, Finding]]:
    """(key path, finding) for every distinct secret in a result; a tool whose name says it
    hands out secrets (`secret_tool`) also for its mixed-character values (`tool_values`)."""
    job = secret_tool(tool)
    out: list[tuple[str, Finding]] = []
    seen: set[str] = set()
    for key, text in iter_strings(result):
        if leaf_key(key) in _NOT_TEXT or len(text) < MIN_VALUE:
            continue
        for f in find_secrets(text) + (tool_values(text) if job else ()):
            if f.value not in seen:
                seen.add(f.value)
                out.append((key, f))
        if len(out) >= MAX_FINDINGS:
            break
    return out[:MAX_FINDINGS]


def sightings(server: str, tool: str, result: Any, arguments: Any = None) -> tuple[Sighting, ...]:
    """The secrets a result of `tool` on `server` handed the agent, minus the values the
    call's own arguments carried (the agent's, echoed back)."""
    args = [t for _, t in iter_strings(arguments)] if arguments else []
    return tuple(
        Sighting(server, tool, f.kind, f.value)
        for _, f in result_secrets(tool, result)
        if not any(f.value in a for a in args)
    )


__all__ = [
    "CREDENTIAL_WORDS",
    "MAX_FINDINGS",
    "Finding",
    "Sighting",
    "asks_for_credentials",
    "b64_forms",
    "carries",
    "entropy",
    "find_secrets",
    "formats",
    "looks_real",
    "name_words",
    "result_secrets",
    "secret_tool",
    "sightings",
    "tool_values",
]
