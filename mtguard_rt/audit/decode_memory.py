"""`SecretMemory`: what one server's recent calls read and returned, for secrets split
across calls.

Bounded, one per server (on its `ServerBaseline`): the secret material its last calls read
from files (`MAX_MATERIAL` values, each with the call that read it) and the token-like
fragments of its last `MAX_TAILS` results. A later result that carries a part of remembered
material (`decode.find_known`), or whose fragments complete a self-identifying format with
a fragment of an earlier result (`across`), is a secret leaving in pieces: the evidence
names both calls. Pure data; the rule that reads it also feeds it, once per call.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from .secret_formats import FORMATS
from .secrets import formats

MAX_MATERIAL = 32  # secret values remembered per server (the latest calls' reads)
MAX_TAILS = 2  # results whose fragments are remembered
MAX_FRAGMENTS = 32  # fragments kept per result (its head's and tail's)
FRAGMENT_REACH = 4096  # chars at a result's head and tail that fragments are taken from
_FRAGMENT = re.compile(r"[A-Za-z0-9_+/=.~:-]{4,120}")
_ANCHORS = tuple(a for _, anchors, _, _ in FORMATS for a in anchors)


@dataclass(frozen=True, slots=True)
class Remembered:
    """A secret value a call of this server read (`source`: the file) or returned."""

    call: str  # "tool (call id)"
    source: str
    value: str


def fragments(text: str) -> list[str]:
    """Token-like runs at the head and the tail of `text` holding a digit or a format's
    anchor (where a split token's halves are), at most `MAX_FRAGMENTS`."""
    if len(text) > 2 * FRAGMENT_REACH:
        text = f"{text[:FRAGMENT_REACH]} {text[-FRAGMENT_REACH:]}"
    out = [
        f
        for f in (m.group(0).strip(":.=") for m in _FRAGMENT.finditer(text))
        if any(c.isdigit() for c in f) or any(a in f for a in _ANCHORS)
    ]
    return out[: MAX_FRAGMENTS // 2] + out[MAX_FRAGMENTS // 2 :][-MAX_FRAGMENTS // 2 :]


def _format_at(text: str) -> tuple[str, str, int] | None:
    for kind, value in formats(text):
        return kind, value, text.find(value)
    return None


class SecretMemory:
    """One server's memory (see the module)."""

    def __init__(self) -> None:
        self.material: deque[Remembered] = deque(maxlen=MAX_MATERIAL)
        self.tails: deque[tuple[str, tuple[str, ...]]] = deque(maxlen=MAX_TAILS)

    def remember(self, call: str, material: Iterable[tuple[str, str]], text: str) -> None:
        """What `call` read (source, value) and the fragments of its result `text`."""
        known = {m.value for m in self.material}
        for source, value in material:
            if value not in known:
                known.add(value)
                self.material.append(Remembered(call, source, value))
        self.tails.append((call, tuple(fragments(text))))

    def across(self, text: str) -> list[tuple[Remembered, str]]:
        """(the earlier piece, kind) for each self-identifying format that an earlier
        result's fragment and one of `text`'s make together, neither holding it alone; the
        `Remembered` carries the joined value and the earlier call."""
        current = fragments(text)
        out: list[tuple[Remembered, str]] = []
        seen: set[str] = set()
        for call, earlier in self.tails:
            for head in (f for f in earlier if any(a in f for a in _ANCHORS)):
                for tail in current:
                    joined = head + tail
                    found = _format_at(joined)
                    if found is None or found[1] in seen:
                        continue
                    kind, value, start = found
                    if start < len(head) < start + len(value) and value not in text:
                        seen.add(value)
                        out.append((Remembered(call, "its result", value), kind))
        return out


__all__ = ["MAX_MATERIAL", "Remembered", "SecretMemory", "fragments"]
