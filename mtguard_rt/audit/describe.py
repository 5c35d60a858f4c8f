"""What a loaded policy enforces, for people: each rule's mode and the layer that set it,
each rule's settings and the shared lists, as text (`render_policy`) or plain data
(`describe_policy`, JSON-ready). The policy is already validated; this only reads it.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from .policy import Policy
from .spec import RULE_IDS

SHOWN_ITEMS = 6  # list items shown before "... and N more" (all with full=True)
ITEM_WIDTH = 60  # characters of one item shown (all with full=True)


@dataclass
class RuleSummary:
    rule: str
    mode: str
    mode_from: str  # the layer that set the mode last ("default": none did)
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicySummary:
    sources: list[str]
    description: str
    guard: dict[str, Any]
    rules: list[RuleSummary]
    lists: dict[str, list[str]]


def _layers(policy: Policy) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for src in policy.sources:
        try:
            out.append((src, tomllib.loads(Path(src).read_text(encoding="utf-8"))))
        except (OSError, tomllib.TOMLDecodeError):
            out.append((src, {}))  # already validated at load; changed since: no provenance
    return out


def describe_policy(policy: Policy) -> PolicySummary:
    layers = _layers(policy)
    rules = []
    for rule in RULE_IDS:
        spec = msgspec.to_builtins(getattr(policy.spec.rules, rule.replace("-", "_")))
        mode = spec.pop("mode", policy.mode_of(rule))
        origin = "default"
        for src, raw in layers:
            if "mode" in raw.get("rules", {}).get(rule, {}):
                origin = os.path.basename(src)
        rules.append(RuleSummary(rule, mode, origin, spec))
    return PolicySummary(
        sources=list(policy.sources),
        description=policy.spec.description,
        guard=msgspec.to_builtins(policy.spec.guard),
        rules=rules,
        lists=msgspec.to_builtins(policy.spec.lists),
    )


def _items(values: list[Any], full: bool) -> str:
    shown = [str(v) if isinstance(v, str | int | float) else _short(v) for v in values]
    if not full:
        shown = [t if len(t) <= ITEM_WIDTH else t[: ITEM_WIDTH - 3] + "..."
                 for t in shown[:SHOWN_ITEMS]]
    text = ", ".join(shown)
    more = len(values) - SHOWN_ITEMS
    return text + (f", ... and {more} more" if more > 0 and not full else "")


def _short(value: Any) -> str:
    if isinstance(value, dict) and "name" in value:
        return str(value["name"])
    return str(value)


def _setting(key: str, value: Any, full: bool) -> str:
    if isinstance(value, list):
        return f"{key} ({len(value)}): {_items(value, full)}" if value else f"{key}: none"
    if isinstance(value, dict):
        return f"{key} ({len(value)}): {_items(sorted(value), full)}"
    return f"{key} = {value}"


def render_policy(policy: Policy, *, full: bool = False) -> str:
    """The effective policy: layers, guard settings, rule modes, rule settings, lists."""
    s = describe_policy(policy)
    width = max(len(r.rule) for r in s.rules)
    lines = [
        "layers: " + " -> ".join(s.sources),
        f"description: {s.description or '(none)'}",
        f"guard: mode {s.guard['mode']}, pinning_action {s.guard['pinning_action']}",
        "rules:",
    ]
    for r in s.rules:
        lines.append(f"  {r.rule:<{width}}  {r.mode:<7}  (mode from {r.mode_from})")
        for key, value in r.settings.items():
            lines.append(f"      {_setting(key, value, full)}")
    counts = {m: sum(r.mode == m for r in s.rules) for m in ("enforce", "observe", "off")}
    lines.append("lists:")
    for key, value in s.lists.items():
        lines.append(f"  {_setting(key, value, full)}")
    lines.append(", ".join(f"{n} {m}" for m, n in counts.items()) + " rules")
    return "\n".join(lines) + "\n"


__all__ = ["PolicySummary", "RuleSummary", "describe_policy", "render_policy"]
