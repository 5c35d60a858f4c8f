"""Decoded views of untrusted text, and known secret values found in any form of it.

`views(text)` gives the forms an encoder hides text in: zero-width and bidi characters
removed, url (percent) and quoted-printable decoded, MIME-wrapped (line-broken) base64 joined
and decoded; built from the first `MAX_VIEW_CHARS` of a text only (a result can be 70 MB).
`find_known(text, value)` says how `text` carries a value known to be secret (a canary marker,
a credential the call read from a file): whole (in the first `MAX_VIEW_CHARS`) or a part of
`MIN_PART`+ characters (in the first `MAX_PART_CHARS`), plain, in a view, reversed, ROT13,
base64 at any alignment (line-broken too), hex, or split by spaces and dashes. Generic
formats are `secrets.find_secrets`'s. Pure; views cached per text."""

from __future__ import annotations

import base64
import binascii
import quopri
import re
from functools import lru_cache
from urllib.parse import unquote

from .text import printable

MAX_VIEW_CHARS = 1 << 20  # per text: views and known values are looked for in its first 1 MB
MIN_PART = 12  # shortest part of a known value that counts as carrying it
MAX_PART_CHARS = 64 * 1024  # ... looked for in a text's first 64 KB (whole values: 1 MB)
B64_PART = MIN_PART + 4  # ... in base64 (whose matchable core spells ~4 fewer characters)
PART_STRIDE = 4  # parts tried every this many characters (a part of 15+ is always found)
MIN_ESCAPES = 1  # %XX / =XX escapes a text needs before it is decoded as url / q-p

_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")
_QP = re.compile(r"=(?:[0-9A-F]{2}|\r?\n)")
# two or more lines of base64 alphabet only (MIME wraps at 64 or 76), the last one shorter
_B64_LINES = re.compile(
    r"(?m)^[ \t]*[A-Za-z0-9+/]{16,}[ \t]*\r?\n(?:[ \t]*[A-Za-z0-9+/]{4,}={0,2}[ \t]*(?:\r?\n|$))+"
)
_ROT13 = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm",
)
_SQUEEZE = re.compile(r"[\s-]+")


def rot13(text: str) -> str:
    return text.translate(_ROT13)


def _escapes(rx: re.Pattern[str], text: str) -> bool:
    it = rx.finditer(text)
    return sum(1 for _ in zip(range(MIN_ESCAPES), it, strict=False)) >= MIN_ESCAPES


def _mime_base64(text: str) -> str | None:
    """The decoded text of every line-broken base64 block that decodes to readable text."""
    out = []
    for m in _B64_LINES.finditer(text):
        joined = "".join(m.group(0).split())
        try:
            data = base64.b64decode(joined + "=" * (-len(joined) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        if (decoded := printable(data)) is not None:
            out.append(decoded)
    return "\n".join(out) or None


@lru_cache(maxsize=16)
def views(text: str) -> tuple[tuple[str, str], ...]:
    """(form, decoded text) for each decoding that changes the first `MAX_VIEW_CHARS`."""
    head = text[:MAX_VIEW_CHARS]
    out: list[tuple[str, str]] = []
    if _INVISIBLE.search(head):
        head = _INVISIBLE.sub("", head)
        out.append(("zero-width-joined", head))
    if "%" in head and _escapes(_PCT, head):
        out.append(("url-encoded", unquote(head)))
    if "=" in head and _escapes(_QP, head):
        qp = quopri.decodestring(head.encode("utf-8", "replace")).decode("utf-8", "replace")
        out.append(("quoted-printable", qp))
    if "\n" in head and (mime := _mime_base64(head)) is not None:
        out.append(("line-broken base64", mime))
    return tuple(out)


@lru_cache(maxsize=16)
def _haystacks(text: str) -> tuple[str, str, str]:
    """(the head, lower-cased, with spaces/dashes/newlines squeezed out)."""
    head = text[:MAX_VIEW_CHARS]
    return head, head.lower(), _SQUEEZE.sub("", head)


def b64_forms(value: str) -> list[str]:
    """Substrings that any base64 encoding of `value` contains, whatever its offset."""
    data = value.encode()
    forms = []
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + data).decode()
        start = (pad * 4 + 2) // 3 + 1
        forms.append(enc[start : len(enc) - 4])
    return [f for f in forms if len(f) >= 8]


@lru_cache(maxsize=1024)
def _needles(value: str, b64: bool) -> tuple[tuple[str, ...], str, str, str, str]:
    """The encodings of `value` that `_form_of` looks for (base64 forms, hex, reversed,
    ROT13, squeezed): the same known values (canary markers, their parts) every call."""
    forms = tuple(b64_forms(value)) if b64 else ()
    return forms, value.encode().hex(), value[::-1], rot13(value), _SQUEEZE.sub("", value)


def _form_of(text: str, value: str, b64: bool = True) -> str | None:
    """How `text` carries all of `value` (see the module), or None. `b64`: also base64 (an
    encoding of a short part spells fewer of its characters: parts are tried longer there)."""
    head, lower, squeezed = _haystacks(text)
    if value in head:
        return "plain"
    forms, hexed, backwards, r, bare = _needles(value, b64)
    if any(f in head for f in forms):
        return "base64"
    if hexed in lower:
        return "hex"
    if backwards in head:
        return "reversed"
    if r != value and r in head:
        return "ROT13"
    if len(bare) >= MIN_PART and bare in squeezed:
        return "split"
    if any(f in squeezed for f in forms):
        return "line-broken base64"
    for form, view in views(text):
        if value in view or any(f in view for f in forms):
            return form
    return None


def _strong(part: str) -> bool:
    """Could `part` not turn up by chance: digits, letters and 8+ distinct characters."""
    return len(set(part)) >= 8 and any(c.isdigit() for c in part) and any(c.isalpha() for c in part)


def parts(value: str, size: int = MIN_PART) -> list[str]:
    """The parts of `value` looked for: every `PART_STRIDE`th window of `size` chars and the
    last one (a prefix or a suffix of `size`+ is always among them), strong ones only."""
    return list(_parts(value, size))


@lru_cache(maxsize=256)  # the same known values every call
def _parts(value: str, size: int) -> tuple[str, ...]:
    if len(value) <= size:
        return ()
    starts = [*range(0, len(value) - size, PART_STRIDE), len(value) - size]
    return tuple(p for p in dict.fromkeys(value[i : i + size] for i in starts) if _strong(p))


def find_known(
    text: str, value: str, min_value: int = 8, partial: bool = True
) -> tuple[str, str] | None:
    """(form, what was found: the value or one of its `parts`) when `text` carries the known
    secret `value` whole (or, `partial`, in part), else None. A part's form: "part, <form>"."""
    if len(value) < min_value:
        return None
    if (form := _form_of(text, value)) is not None:
        return form, value
    if not partial:
        return None
    text = text[:MAX_PART_CHARS]
    for part in parts(value):
        if (form := _form_of(text, part, b64=False)) is not None:
            return f"part, {form}", part
    for part in parts(value, B64_PART):
        if (form := _form_of(text, part)) is not None:
            return f"part, {form}", part
    return None


__all__ = ["MAX_VIEW_CHARS", "MIN_PART", "find_known", "parts", "rot13", "views"]
