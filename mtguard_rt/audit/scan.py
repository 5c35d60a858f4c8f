"""Scan of every server-to-host message that is not a `tools/call` result (issue 17).

A `tools/call` result is judged by the post rules. Everything else the server sends (the
`initialize` result and its instructions, tool/prompt/resource listings and their
descriptions, notifications, server-to-client requests such as sampling or elicitation, and
JSON-RPC `error` objects) is checked here before it is relayed: a canary marker anywhere in
it, whole or a part, in any form `decode.find_known` reads (raw, base64 at any alignment, hex,
reversed, ROT13, url, q-p, zero-width, line-broken base64, split), and secrets
(`secrets.find_secrets`, the one detector the result rules share, plus the policy's secret
patterns) in the parts that are the server's own words (instructions, descriptions,
notifications, requests, errors; not the content of a resource or prompt the host asked for,
which is the user's data). Pure functions; the supervisor decides what is withheld and
records it.
"""

from __future__ import annotations

import re
from typing import Any

from .decode import find_known
from .secrets import find_secrets
from .text import iter_strings

# Responses whose whole content is the server's own words (secret patterns are checked).
OWN_WORDS = (
    "initialize",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
)


def message_label(message: dict[str, Any], answered: str | None) -> str:
    """The audit record's tool for a message: "(initialize)", "(tools/list)",
    "(notification)", "(request sampling/createMessage)", "(response)"."""
    method = message.get("method")
    if isinstance(method, str):
        return "(notification)" if message.get("id") is None else f"(request {method})"
    return f"({answered})" if answered else "(response)"


def _texts(message: dict[str, Any]) -> str:
    body = {k: v for k, v in message.items() if k not in ("jsonrpc", "id")}
    return "\n".join(text for _, text in iter_strings(body))


def marker_hits(text: str, canaries: dict[str, str]) -> list[str]:
    """Evidence ("the marker of canary P", "the base64 marker of ...", "a part of the marker
    of ... (reversed)") for each canary whose marker `text` carries in any form or in
    part (`decode.find_known`). A part of a marker in a later output is the taint of an
    earlier read that was not denied (observe mode, between calls), whatever read it."""
    hits = []
    for path, marker in canaries.items():
        if not marker or (found := find_known(text, marker)) is None:
            continue
        form, what = found
        if what != marker:
            hits.append(f"a part of the marker of canary {path} ({form.removeprefix('part, ')})")
        elif form == "plain":
            hits.append(f"the marker of canary {path}")
        elif form in ("base64", "hex"):
            hits.append(f"the {form} marker of canary {path}")
        else:
            hits.append(f"the marker of canary {path} ({form})")
    return hits


def scan_message(
    message: dict[str, Any],
    answered: str | None,
    canaries: dict[str, str],
    secrets: re.Pattern[str] | None,
) -> tuple[str, list[str]]:
    """(rule, evidence) for what `message` must not carry to the host; evidence empty when
    it is clean. `answered` is the method of the host request it answers, if a response."""
    text = _texts(message)
    if hits := marker_hits(text, canaries):
        return "canary-touched", [f"the server's message carries {h}" for h in hits]
    own = "method" in message or "error" in message or answered in OWN_WORDS
    if not own:
        return "", []
    found = [f.describe() for f in find_secrets(text)]  # redacted: a prefix and the length
    if secrets is not None and (m := secrets.search(text)):
        found.append(f"key material ({len(m.group(0))} characters matching a secret pattern)")
    if found:
        return "secret-in-message", [f"the server's message carries {d}" for d in found]
    return "", []


__all__ = ["OWN_WORDS", "marker_hits", "message_label", "scan_message"]
