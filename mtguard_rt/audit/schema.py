"""Remove attacker-controlled free text from tool definitions before anything judges them.

`strip_descriptions(obj)` returns a deep copy of a tool definition or JSON schema without
`description`, `title`, `$comment` and `examples` anywhere, while keeping the *names* of
properties (a property may itself be called "description"). The input is never mutated.
"""

from __future__ import annotations

from typing import Any

FREE_TEXT_KEYS = frozenset({"description", "title", "$comment", "examples"})
# Keys whose value maps names to sub-schemas: the names are structure, not free text.
NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def strip_descriptions(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` (a tool or an inputSchema) with every free-text field removed."""
    return _strip_schema(schema)


def _strip_schema(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in FREE_TEXT_KEYS:
            continue
        if key in NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: _strip_any(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_any(value)
    return out


def _strip_any(value: Any) -> Any:
    if isinstance(value, dict):
        return _strip_schema(value)
    if isinstance(value, list):
        return [_strip_any(v) for v in value]
    return value
