"""Normalise a tool result and compare a guarded one with the unguarded one.

`normalise(result, subs)` keeps what a call's outcome is (isError, text and structured
content) and masks what legitimately differs between two runs of the same work: the run's own
paths (workspace, home, site URL, user name: `subs`), timestamps, dates, clock times,
durations, UUIDs, hex ids (commit hashes), pids, epoch seconds and temp names.
`classify()` says what one call was: ok, a false positive (the guard denied it), broken (allowed
but its normalised result differs: a short diff says how) or a session error (the unguarded
server's own answer was not what the session expects).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

Status = Literal["ok", "fp", "broken", "session-error"]
DENIED_PREFIX = "mtguard denied"
DIFF_LINES = 12  # a broken call's diff is cut to this many lines

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
# Order matters: the widest forms first, so a timestamp is not cut into a date and a time.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
     "<uuid>"),
    # ISO 8601, also the file-name form with dashes for colons (2026-12-01T12-27-50-420Z)
    (re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?|"
                r"T\d{2}-\d{2}(?:-\d{2}(?:[.,-]\d+)?)?)(?:Z|\s?[+-]\d{2}:?\d{2}|\s?UTC)?"),
     "<ts>"),
    (re.compile(rf"\b(?:{_DAY},?\s+)?(?:\d{{1,2}}\s+{_MONTH}|{_MONTH}\s+\d{{1,2}}),?\s+"
                r"(?:\d{4}\s+)?\d{1,2}:\d{2}(?::\d{2})?(?:\s+\d{4})?(?:\s+(?:[+-]\d{4}|GMT|UTC))?"),
     "<ts>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{4}/\d{2}/\d{2}\b"), "<date>"),
    (re.compile(rf"\b(?:{_DAY},?\s+)?{_MONTH}\s+\d{{1,2}}(?:,?\s+\d{{4}})?\b"), "<date>"),
    (re.compile(r"\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b"), "<time>"),
    (re.compile(r"\b1[5-9]\d{8}(?:\.\d+)?\b"), "<epoch>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds?|minutes?)\b"), "<dur>"),
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b"), "<hex>"),
    # a hash field whose short form happens to be all digits ("shortHash": "7431126")
    (re.compile(r'(?i)((?:hash|sha)\w*\\?"\s*:\s*\\?")\d{7,64}\b'), r"\1<hex>"),
    (re.compile(r"\b(pid|PID|process id)([\s:=#]+)\d+\b"), r"\1\2<pid>"),
    (re.compile(r"\btmp[A-Za-z0-9_]{6,}\b"), "<tmp>"),
]


def normalise_text(text: str, subs: Mapping[str, str]) -> str:
    """`text` with the run's own strings replaced (longest first), then the volatile forms."""
    for old in sorted(subs, key=len, reverse=True):
        if old:
            text = re.sub(rf"(?<![\w]){re.escape(old)}(?![\w])" if old.isalnum() else
                          re.escape(old), subs[old].replace("\\", "\\\\"), text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _walk(value: Any, subs: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return normalise_text(value, subs)
    if isinstance(value, int | float) and not isinstance(value, bool) and _is_epoch(value):
        return "<epoch>"  # a structured timestamp, as the text form's <epoch>
    if isinstance(value, list):
        return [_walk(v, subs) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, subs) for k, v in value.items() if k != "_meta"}
    return value


def _is_epoch(value: float) -> bool:
    """Epoch seconds or milliseconds in the range the text pattern masks (2017-2033)."""
    return 1.5e9 <= value < 2e9 or 1.5e12 <= value < 2e12


def normalise(result: Mapping[str, Any], subs: Mapping[str, str]) -> dict[str, Any]:
    """The comparable part of a tool result (or of `{"rpcError": ...}` for a failed request)."""
    out: dict[str, Any] = {"isError": bool(result.get("isError", False))}
    if "rpcError" in result:
        out["rpcError"] = normalise_text(str(result["rpcError"]), subs)
    out["content"] = _walk(list(result.get("content", [])), subs)
    if result.get("structuredContent") is not None:
        out["structuredContent"] = _walk(result["structuredContent"], subs)
    return out


def text_of(result: Mapping[str, Any]) -> str:
    return "\n".join(
        str(c.get("text", "")) for c in result.get("content", []) if isinstance(c, dict)
    )


def is_denial(result: Mapping[str, Any]) -> bool:
    return bool(result.get("isError")) and text_of(result).startswith(DENIED_PREFIX)


def is_error(result: Mapping[str, Any]) -> bool:
    return bool(result.get("isError")) or "rpcError" in result


def diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """A short unified diff of two normalised results (unguarded -> guarded)."""
    left = json.dumps(a, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
    right = json.dumps(b, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
    lines = list(difflib.unified_diff(left, right, "unguarded", "guarded", n=1, lineterm=""))
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... ({len(lines) - DIFF_LINES} more diff lines)"]
    return "\n".join(lines)


def classify(
    unguarded: Mapping[str, Any],
    guarded: Mapping[str, Any],
    *,
    denied: bool,
    expect_error: bool,
    subs_unguarded: Mapping[str, str],
    subs_guarded: Mapping[str, str],
) -> tuple[Status, str]:
    """What the call was, and the detail (the diff of a broken call, why a session error).
    A denial comes first: whatever the session expected, the guard blocked a benign call."""
    if denied or is_denial(guarded):
        return "fp", text_of(guarded)[:300]
    if is_error(unguarded) != expect_error:
        said = "an error" if is_error(unguarded) else "a success"
        return "session-error", f"unguarded answer was {said}: {text_of(unguarded)[:200]}"
    a = normalise(unguarded, subs_unguarded)
    b = normalise(guarded, subs_guarded)
    if a != b and _digits_as_hex(a) != _digits_as_hex(b):
        return "broken", diff(a, b)
    return "ok", ""


_DIGIT_RUN = re.compile(r"(?<![\w.])\d{7,40}(?![\w.])")


def _digits_as_hex(value: Any) -> Any:
    """`value` with every bare run of 7-40 digits read as a hex id: an abbreviated commit
    hash is all digits about 4% of the time (`git log --oneline`), which the hex pattern
    (it needs a letter, or any count would be masked) cannot tell from a number. Only a
    difference that is nothing else is forgiven."""
    if isinstance(value, str):
        return _DIGIT_RUN.sub("<hex>", value)
    if isinstance(value, list):
        return [_digits_as_hex(v) for v in value]
    if isinstance(value, dict):
        return {k: _digits_as_hex(v) for k, v in value.items()}
    return value
