"""Agent-Aegis Tool Result Inspection (TRI), re-implemented from its published description.

`inspect_result(text)` judges the text a tool returned to the agent: chat special tokens are
stripped, the text is scanned for five phrase groups (role takeover, policy bypass, tool
induction, secret requests, exfiltration requests), and base64 / hex / URL-encoded payloads
are decoded (up to two levels) and scanned too. Suspicious when an explicit phrase matches,
when a decoded payload carries a takeover, bypass, induction or exfiltration flag, or when
two distinct groups' weaker cues fire. Returns the reason, or None.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

SPECIAL_TOKENS = re.compile(
    r"<\|[a-z_]+\|>|\[/?inst\]|<</?sys>>|<\|?(system|user|assistant)\|?>|<s>|</s>", re.I
)
# group -> (explicit phrases: one is enough, cues: count toward "two distinct groups")
GROUPS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "takeover": (
        re.compile(
            r"ignore (all |any )?(the )?(previous|prior|above|earlier) (instructions|prompts|rules)"
            r"|you are now\b|new (system )?instructions?:|disregard (your|the|all) "
            r"(instructions|rules|guidelines)|from now on,? you",
            re.I,
        ),
        re.compile(r"\bsystem (notice|message|override|prompt)\b|<important>|\bas an ai\b", re.I),
    ),
    "bypass": (
        re.compile(
            r"(bypass|disable|override|ignore) (the |all |any )?(safety|security|policy|"
            r"guardrails?|restrictions?|filters?)|do not (tell|inform|mention .{0,20} to) "
            r"the user|without (telling|informing|asking) the user",
            re.I,
        ),
        re.compile(r"\b(secretly|silently|quietly|covertly)\b|\bdo not mention\b", re.I),
    ),
    "induction": (
        re.compile(
            r"(you must|you should|always|first) (now )?(call|use|invoke|run|execute) "
            r"(the )?[\w.-]+( tool| function| command)?|(call|invoke|use) the tool [`'\"]?\w+",
            re.I,
        ),
        re.compile(r"\b(call|invoke|execute|run)\b.{0,40}\b(tool|function|command)\b", re.I),
    ),
    "secret": (
        re.compile(
            r"(send|give|provide|reveal|share|include) (me |us )?(your |the )?"
            r"(api[_ ]?keys?|passwords?|private keys?|credentials|tokens?|secrets?)",
            re.I,
        ),
        re.compile(
            r"\bid_rsa\b|\.(ssh|aws|netrc)\b|\b(api[_ ]?key|password|credentials?|private key)\b",
            re.I,
        ),
    ),
    "exfiltration": (
        re.compile(
            r"(send|upload|post|forward|exfiltrate|transmit) (it|them|this|the \w+|all \w+)"
            r" to (https?://|\S+@|the (server|endpoint|url))",
            re.I,
        ),
        re.compile(r"\b(curl|wget|nc|webhook|exfiltrat\w*|upload)\b|https?://\S+", re.I),
    ),
}
ENCODED_FLAGS = ("takeover", "bypass", "induction", "exfiltration")
B64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}){8,}\b")
URLENC = re.compile(r"(?:%[0-9a-fA-F]{2}){3,}")
MAX_LEVELS = 2


def _decoded(text: str) -> list[str]:
    out: list[str] = []
    for m in B64.finditer(text):
        chunk = m.group(0)
        try:
            raw = base64.b64decode(chunk + "=" * (-len(chunk) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        out.append(raw.decode("utf-8", "ignore"))
    for m in HEX.finditer(text):
        out.append(bytes.fromhex(m.group(0)).decode("utf-8", "ignore"))
    if URLENC.search(text):
        out.append(urllib.parse.unquote(text))
    return [d for d in out if sum(c.isprintable() or c.isspace() for c in d) >= 0.9 * len(d) > 0]


def _flags(text: str) -> tuple[set[str], set[str]]:
    explicit = {g for g, (strong, _) in GROUPS.items() if strong.search(text)}
    cues = {g for g, (_, weak) in GROUPS.items() if weak.search(text)}
    return explicit, cues


def inspect_result(text: str) -> str | None:
    clean = SPECIAL_TOKENS.sub(" ", text)
    explicit, cues = _flags(clean)
    if explicit:
        return f"explicit {', '.join(sorted(explicit))} phrase"
    layer = [clean]
    for level in range(1, MAX_LEVELS + 1):
        layer = [d for t in layer for d in _decoded(t)]
        for payload in layer:
            found, weak = _flags(SPECIAL_TOKENS.sub(" ", payload))
            hits = (found | weak) & set(ENCODED_FLAGS)
            if hits:
                return f"encoded payload (level {level}) with {', '.join(sorted(hits))} flags"
    if len(cues) >= 2:
        return f"two distinct flags: {', '.join(sorted(cues))}"
    return None
