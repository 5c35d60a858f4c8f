"""Path globs and domain names, compiled once at policy load into single regexes.

A path glob starts with `/`, `~/` (any home: /home/<user> or /root) or `**/` (anywhere);
`**` spans directories, `*` and `?` stay inside one component. A `PathSet` answers two
questions: does an absolute observed path match (anchored), and does free text (an argument,
a command line) name a matching path (the glob's tail, found at a path boundary).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

HOME_RE = r"(?:/home/[^/]+|/root)"


class GlobError(ValueError):
    pass


def _translate(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if body.startswith("**/", i):
            out.append(r"(?:[^\s]*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(r"[^\s]*")
            i += 2
        elif c == "*":
            out.append(r"[^/\s]*")
            i += 1
        elif c == "?":
            out.append(r"[^/\s]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def glob_to_regex(glob: str) -> tuple[str, str]:
    """(anchored regex for absolute paths, unanchored regex for a mention in free text)."""
    if not glob or glob != glob.strip():
        raise GlobError(f"path pattern {glob!r} is empty or has surrounding spaces")
    if glob.startswith("~/"):
        body = glob[2:]
        absolute = HOME_RE + "/" + _translate(body)
        # in text: ~/x, $HOME/x, /home/u/x, or a relative .../x at a path boundary
        mention = r"(?:(?<=[/~])|(?<![\w.\-$]))" + _translate(body)
    elif glob.startswith("**/"):
        body = glob[3:]
        absolute = r"(?:/[^\s]*)?/" + _translate(body)
        mention = r"(?:(?<=/)|(?<![\w.\-$]))" + _translate(body)
    elif glob.startswith("/"):
        absolute = _translate(glob)
        mention = r"(?<![\w.\-])" + _translate(glob)
    else:
        raise GlobError(f"path pattern {glob!r} must start with '/', '~/' or '**/'")
    if "//" in glob:
        raise GlobError(f"path pattern {glob!r} has an empty component")
    return absolute + r"/?", mention + (r"/?(?![\w.\-])" if not glob.endswith("*") else "")


class PathSet:
    """Globs compiled once: an anchored matcher for paths, a finder for mentions in text.

    Both are prefiltered: a path can only match a glob if it holds the glob's key component
    (or starts with its literal prefix), and text can only mention it if it contains that
    key; most paths (libraries, /proc/self, ...) and most arguments fail every prefilter.
    """

    def __init__(self, globs: Iterable[str]) -> None:
        self.globs = list(dict.fromkeys(globs))
        pairs = [glob_to_regex(g) for g in self.globs]
        self._abs: re.Pattern[str] | None = None
        if pairs:
            self._abs = re.compile("|".join(f"(?:{a})" for a, _ in pairs).join(("^(?:", ")$")))
        self._mentions = [
            (_prefilter(g)[1], re.compile(m)) for g, (_, m) in zip(self.globs, pairs, strict=True)
        ]
        keys: set[str] = set()
        prefixes: list[str] = []
        self.always = False
        for g in self.globs:
            kind, value = _prefilter(g)
            if kind == "key":
                keys.add(value)
            elif kind == "prefix":
                prefixes.append(value)
            else:
                self.always = True
        self.keys = frozenset(keys)
        self.prefixes = tuple(prefixes)

    def __bool__(self) -> bool:
        return bool(self.globs)

    def matches(self, path: str, parts: list[str] | None = None) -> bool:
        """Does the absolute `path` match? (`parts`: its `split("/")`, if already made.)"""
        if self._abs is None:
            return False
        if not self.could_match(path, path.split("/") if parts is None else parts):
            return False
        return self._abs.match(path) is not None

    def could_match(self, path: str, parts: list[str]) -> bool:
        """The cheap prefilter: False means no glob can match."""
        return self.always or not self.keys.isdisjoint(parts) or path.startswith(self.prefixes)

    def mention(self, text: str) -> str | None:
        """The first span of `text` (in glob order) that names a matching path, or None."""
        for key, rx in self._mentions:
            if key in text and (m := rx.search(text)):
                return m.group(0)
        return None

    def which(self, path: str) -> str | None:
        """The first glob an absolute path matches (for evidence), or None."""
        if not self.matches(path):
            return None
        for glob in self.globs:
            if re.match(f"^(?:{glob_to_regex(glob)[0]})$", path):
                return glob
        return None


_WILD = re.compile(r"[*?\[]")


def _prefilter(glob: str) -> tuple[str, str]:
    """("key", component) | ("prefix", literal start) | ("always", "") for one glob."""
    if glob.startswith("/"):
        first = _WILD.search(glob)
        if first is None:
            return "prefix", glob
        later = [c for c in glob[first.start() :].split("/")[1:] if c and not _WILD.search(c)]
        return ("key", later[-1]) if later else ("prefix", glob[: first.start()])
    body = glob[2:] if glob.startswith("~/") else glob[3:]
    plain = [c for c in body.split("/") if c and not _WILD.search(c)]
    return ("key", plain[-1]) if plain else ("always", "")


def normalize_domain(name: str) -> str:
    return name.strip().rstrip(".").lower()


def domain_within(host: str, domains: Iterable[str]) -> bool:
    """True when `host` equals one of `domains` or is a subdomain of one."""
    h = normalize_domain(host)
    for d in domains:
        d = normalize_domain(d)
        if d.startswith("*."):
            d = d[2:]
        if d and (h == d or h.endswith("." + d)):
            return True
    return False


def canonical_ip(text: str) -> str | None:
    """The canonical form of an IP literal (IPv4-mapped IPv6 unwrapped), else None."""
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def is_loopback(address: str) -> bool:
    ip = canonical_ip(address)
    return ip is not None and ipaddress.ip_address(ip).is_loopback
