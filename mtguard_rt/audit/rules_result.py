"""Post-execution rule on the result itself: instructions aimed at the agent.

Return injection puts text such as "ignore all previous instructions" or hidden
`<IMPORTANT>` blocks into a tool's result so the agent's next call serves the attacker.
The policy's named patterns are searched in every string of the result (decoded base64
payloads included); observe by default, since a page *about* injection also matches.
"""

from __future__ import annotations

from typing import Any

from ..model import Violation
from .context import CallContext
from .policy import Policy
from .rules_pre import violation
from .text import decoded_variants, iter_strings
from .treeview import TreeView

MAX_RESULT_SCAN_CHARS = 256 * 1024  # per string: head and tail are scanned beyond this
MAX_DECODE_CHARS = 64 * 1024  # per string: base64/hex payloads are looked for this far


def _clip(text: str) -> str:
    half = MAX_RESULT_SCAN_CHARS // 2
    return text if len(text) <= MAX_RESULT_SCAN_CHARS else f"{text[:half]}\n{text[-half:]}"


def result_injection(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    if not policy.injection_patterns:
        return []
    ev: list[str] = []
    for key, raw in iter_strings(result):
        text = _clip(raw)
        variants = [(f"result {key!r}", text)]
        variants += [
            (f"result {key!r} (decoded from {enc})", dec)
            for enc, dec in decoded_variants(text[:MAX_DECODE_CHARS])
        ]
        for where, body in variants:
            lowered = body.lower()
            for pattern in policy.injection_patterns:
                if m := pattern.search(body, lowered):
                    snippet = m.group(0) if len(m.group(0)) <= 80 else m.group(0)[:77] + "..."
                    ev.append(f"{where}: {pattern.name}: {snippet!r}")
    if not ev:
        return []
    return [
        violation(
            "result-injection", policy, "post", "the result carries instructions for the agent", ev
        )
    ]
