"""Tool pinning against rug pulls: pin each server's tools at its first `tools/list`.

A pin is (name, inputSchema hash, description hash). Later lists are compared with
`check()`: added, removed and changed tools are reported as `ToolChange`s, and changed
tools stay blocked (`is_blocked`) until `approve()` re-pins them. The policy's
`pinning_action` says what a blocked tool's calls get: deny, observe or allow.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from .spec import PinAction

ChangeKind = Literal["added", "removed", "changed"]
_canonical = msgspec.json.Encoder(order="sorted")


class ToolPin(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    schema_hash: str
    description_hash: str


class ToolChange(msgspec.Struct, frozen=True, kw_only=True):
    server: str
    tool: str
    kind: ChangeKind
    fields: tuple[str, ...] = ()  # for "changed": "inputSchema", "description"

    def describe(self) -> str:
        what = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"tool {self.tool!r} on {self.server!r} was {self.kind} after pinning{what}"


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical.encode(value)).hexdigest()


def pin_of(tool: dict[str, Any]) -> ToolPin:
    return ToolPin(
        name=str(tool.get("name", "")),
        schema_hash=_digest(tool.get("inputSchema") or {}),
        description_hash=_digest(tool.get("description") or ""),
    )


class ToolPins:
    """Pins per server. Not thread-safe; the supervisor calls it from one task at a time."""

    def __init__(self, action: PinAction = "deny") -> None:
        self.action: PinAction = action
        self._pins: dict[str, dict[str, ToolPin]] = {}
        self._blocked: dict[tuple[str, str], ToolChange] = {}
        self._pending: dict[tuple[str, str], ToolPin] = {}

    def pinned(self, server: str) -> dict[str, ToolPin]:
        return dict(self._pins.get(server, {}))

    def check(self, server: str, tools: list[dict[str, Any]]) -> list[ToolChange]:
        """Compare a `tools/list` with the pins (pinning it when it is the first)."""
        current = {p.name: p for p in map(pin_of, tools)}
        if server not in self._pins:
            self._pins[server] = current
            return []
        pinned = self._pins[server]
        changes: list[ToolChange] = []
        for name, pin in current.items():
            old = pinned.get(name)
            if old is None:
                changes.append(ToolChange(server=server, tool=name, kind="added"))
                pinned[name] = pin  # new tools are pinned as first seen
            elif old == pin:
                self._blocked.pop((server, name), None)  # reverted to the pinned definition
                self._pending.pop((server, name), None)
            else:
                fields = tuple(
                    f
                    for f, differs in (
                        ("inputSchema", old.schema_hash != pin.schema_hash),
                        ("description", old.description_hash != pin.description_hash),
                    )
                    if differs
                )
                change = ToolChange(server=server, tool=name, kind="changed", fields=fields)
                changes.append(change)
                self._blocked[(server, name)] = change
                self._pending[(server, name)] = pin
        for name in pinned.keys() - current.keys():
            changes.append(ToolChange(server=server, tool=name, kind="removed"))
        return changes

    def is_blocked(self, server: str, tool: str) -> ToolChange | None:
        """The unapproved change of this tool, or None when its calls may proceed."""
        if self.action == "allow":
            return None
        return self._blocked.get((server, tool))

    def approve(self, server: str, tool: str) -> bool:
        """Accept a changed tool's new definition as its pin; False if nothing was pending."""
        pin = self._pending.pop((server, tool), None)
        self._blocked.pop((server, tool), None)
        if pin is None:
            return False
        self._pins.setdefault(server, {})[tool] = pin
        return True
