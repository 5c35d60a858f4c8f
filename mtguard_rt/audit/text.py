"""Text views of untrusted call data: argument strings, decoded payloads, hosts, named paths.

Pure helpers the rules share. Arguments are walked to their string leaves (with their key
path); base64 and hex runs are decoded so obfuscated payloads are scanned like plain ones;
hosts come from URLs (any scheme), bare domains with a listed TLD, and IP literals.
"""

from __future__ import annotations

import base64
import binascii
import os.path
import re
import shlex
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

from .patterns import HOME_RE

_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2}){4,}")
_HEX_RUN = re.compile(r"(?<![0-9a-fA-F])[0-9a-fA-F]{16,}(?![0-9a-fA-F])")
_URL = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]{1,15})://([^\s/?#'\"<>`|;]+)")
_HOSTISH = re.compile(
    r"(?<![\w.@/\-])((?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?\.)+([a-zA-Z]{2,24}))(?![\w\-]|\.[a-zA-Z0-9])"
)
_WORDS = re.compile(r"[A-Za-z0-9$][A-Za-z0-9.\-$]*")
_HOME = re.compile(HOME_RE)


def iter_strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string leaf of a JSON value as (key path, text); numbers as their text."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from iter_strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from iter_strings(v, f"{path}[{i}]")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, str(value)


def leaf_key(path: str) -> str:
    """The last key name of a key path: 'a.b[2]' -> 'b'."""
    return re.sub(r"\[\d+\]$", "", path).rsplit(".", 1)[-1]


def printable(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    good = sum(1 for c in text if c.isprintable() or c in "\n\t\r")
    return text if text and good / len(text) > 0.9 else None


def decoded_variants(text: str, min_length: int = 16) -> list[tuple[str, str]]:
    """(encoding, decoded text) for each base64 or hex run that decodes to readable text."""
    out: list[tuple[str, str]] = []
    for m in _B64_RUN.finditer(text):
        run = m.group(0)
        if len(run) < min_length or run.isalpha() or run.isdigit():
            continue
        raw = run.replace("-", "+").replace("_", "/")
        try:
            data = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        if (decoded := printable(data)) is not None:
            out.append(("base64", decoded))
    runs = [m.group(0) for m in _HEX_RUN.finditer(text)]
    if "\\x" in text:
        runs += [m.group(0).replace("\\x", "") for m in _HEX_ESCAPES.finditer(text)]
    for run in runs:
        if len(run) < min_length or len(run) % 2:
            continue
        if (decoded := printable(bytes.fromhex(run))) is not None:
            out.append(("hex", decoded))
    return out


def url_hosts(text: str) -> list[str]:
    """Hosts of every URL in `text` (lower-cased, port and credentials removed)."""
    hosts: list[str] = []
    for m in _URL.finditer(text):
        netloc = unquote(m.group(2)).rsplit("@", 1)[-1]
        try:
            host = urlsplit(f"//{netloc}").hostname
        except ValueError:
            host = None
        if host:
            hosts.append(host.rstrip(".").lower())
    return hosts


def bare_hosts(text: str, tlds: Iterable[str] | None) -> list[str]:
    """Bare domain names (no scheme) whose TLD is in `tlds` (None: any TLD)."""
    allowed = None if tlds is None else {t.lower().lstrip(".") for t in tlds}
    stripped = _URL.sub(" ", text)
    return [
        m.group(1).lower()
        for m in _HOSTISH.finditer(stripped)
        if allowed is None or m.group(2).lower() in allowed
    ]


def words(text: str) -> set[str]:
    return {w.strip(".-").lower() for w in _WORDS.findall(text)}


def _tokens(text: str) -> list[str]:
    try:
        toks = shlex.split(text, comments=False)
    except ValueError:
        toks = text.split()
    out: list[str] = []
    for t in toks:
        t = t.strip("'\"`<>();,|&")
        if t.startswith("file://"):
            t = t[7:]
        if "=" in t and not t.startswith("/"):
            t = t.split("=", 1)[1]
        if t:
            out.append(t)
    return out


def _sentence_ends(toks: list[str]) -> list[str]:
    """Each token, and one that ends a sentence also without its stop ("show ~/.ssh/config.")."""
    out: list[str] = []
    for t in toks:
        out.append(t)
        if t[-1] in ".:!?" and not t.endswith("..") and len(t.rstrip(".:!?")) > 1:
            out.append(t.rstrip(".:!?"))
    return out


TOKEN_CACHE_CHARS = 4096  # texts this short keep their tokens (a task, a path argument)


def _path_tokens(text: str) -> tuple[str, ...] | list[str]:
    """`_sentence_ends(_tokens(text))`: the same task and arguments are asked about for every
    candidate path of a call (shlex is the cost), so a short text's tokens are kept."""
    if len(text) > TOKEN_CACHE_CHARS:
        return _sentence_ends(_tokens(text))
    return _cached_path_tokens(text)


@lru_cache(maxsize=512)
def _cached_path_tokens(text: str) -> tuple[str, ...]:
    return tuple(_sentence_ends(_tokens(text)))


def names_path(texts: Iterable[str], path: str) -> bool:
    """True when some text names the absolute `path` (exactly, via ~ / $HOME, or by a
    relative suffix such as `.ssh/id_rsa` or `notes/todo.txt`)."""
    bare = path.rstrip("/")
    base = bare[bare.rfind("/") + 1 :]  # its basename: a text not holding it names nothing
    home = None
    for text in texts:
        if base not in text:
            continue
        home = home or _HOME.match(path)
        for tok in _path_tokens(text):
            if home and (tok.startswith("~/") or tok.startswith("$HOME/")):
                tok = home.group(0) + tok[tok.index("/") :]
            norm = os.path.normpath(tok)
            if norm.startswith("/"):
                if norm == path:
                    return True
            elif not norm.startswith("..") and norm != "." and path.endswith("/" + norm):
                return True
            elif norm.startswith("..") and path.endswith("/" + norm.lstrip("./")):
                return True
    return False
