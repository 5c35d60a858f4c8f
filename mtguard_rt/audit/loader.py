"""Load and layer policy files: `load_policy(paths)` -> `Policy`, errors with file and line.

Each file is parsed (tomllib), validated alone (msgspec, unknown keys rejected) and its
patterns compiled, so an error names the file and line that holds it. Layers merge key by
key, later files winning (tables merge, lists and scalars replace). A file's `extends`
names a preset layered first; the first file extends "balanced" unless it says otherwise.
Presets live in `policies/` (repo checkout) or `mtguard_rt/_policies` (installed wheel).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..errors import PolicyError
from .policy import KeyPath, Policy, SpecError
from .spec import PolicySpec

DEFAULT_PRESET = "balanced"
_HERE = Path(__file__).resolve()
_POLICY_DIRS = (_HERE.parents[2] / "policies", _HERE.parents[1] / "_policies")


def policies_dir() -> Path:
    """The directory holding the shipped presets (checkout first, then the wheel's copy)."""
    for d in _POLICY_DIRS:
        if (d / f"{DEFAULT_PRESET}.toml").is_file():
            return d
    raise PolicyError(str(_POLICY_DIRS[0]), None, "the policy presets are missing")


def preset_path(name: str) -> Path:
    path = policies_dir() / f"{name}.toml"
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name) or not path.is_file():
        raise PolicyError(name, None, f"no policy preset named {name!r}")
    return path


def load_policy(paths: Sequence[Path | str] | None = None) -> Policy:
    """Load `paths` in order (file paths or preset names); None -> the balanced preset."""
    if not paths:
        paths = [DEFAULT_PRESET]
    layers: list[tuple[str, dict[str, Any]]] = []
    for i, p in enumerate(paths):
        _resolve(p, layers, stack=(), default_extends=DEFAULT_PRESET if i == 0 else None)
    merged: dict[str, Any] = {}
    for _, raw in layers:
        merged = _merge(merged, raw)
    merged.pop("extends", None)
    spec = msgspec.convert(merged, PolicySpec)
    return Policy(spec, [src for src, _ in layers])


def _resolve(
    ref: Path | str,
    layers: list[tuple[str, dict[str, Any]]],
    stack: tuple[str, ...],
    default_extends: str | None,
) -> None:
    path, name = Path(ref), str(ref)
    if not path.is_file() and "/" not in name and not name.endswith(".toml"):
        path = preset_path(name)  # a bare name such as "strict"
    key = str(path.resolve())
    if key in stack:
        raise PolicyError(str(path), None, "`extends` forms a cycle")
    raw = _read_layer(path)
    base = raw.get("extends", default_extends)
    if base is not None and base != "none":
        _resolve(base, layers, (*stack, key), None)
    layers.append((str(path), raw))


def _read_layer(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(str(path), None, f"cannot read: {exc}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise PolicyError(str(path), int(m.group(1)) if m else None, str(exc)) from exc
    _anchor_profile(raw, path)
    try:
        Policy(msgspec.convert(raw, PolicySpec), [str(path)])
    except msgspec.ValidationError as exc:
        msg = str(exc)
        where = _parse_where(msg)
        raise PolicyError(str(path), locate(text, where), msg) from exc
    except SpecError as exc:
        raise PolicyError(str(path), locate(text, exc.where), exc.why) from exc
    return raw


def _anchor_profile(raw: dict[str, Any], path: Path) -> None:
    """A relative `[rules.profile-deviation] profile` is relative to the file naming it."""
    rule = raw.get("rules", {}).get("profile-deviation")
    ref = rule.get("profile") if isinstance(rule, dict) else None
    if isinstance(ref, str) and ref and not Path(ref).is_absolute():
        rule["profile"] = str((path.parent / ref).resolve())


def _parse_where(msg: str) -> KeyPath:
    m = re.search(r" - at `\$([^`]*)`", msg)
    parts: list[str | int] = []
    if m:
        for name, idx in re.findall(r"\.([^.\[]+)|\[(\d+)\]", m.group(1)):
            parts.append(int(idx) if idx else name)
    unknown = re.match(r"Object contains unknown field `([^`]+)`", msg)
    if unknown:
        parts.append(unknown.group(1))
    return tuple(parts)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(
    r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=\s*(.*)$"
)
_ELEMENT = re.compile(r"^\s*[\"'{\[0-9tf-]")


def _split_key(key: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.]+", key)]


def locate(text: str, where: KeyPath) -> int | None:
    """The 1-based line of `text` that defines the key path `where` (or its nearest parent)."""
    index: dict[KeyPath, int] = {}
    counts: dict[KeyPath, int] = {}
    table: KeyPath = ()
    array: KeyPath | None = None  # key path of an open multi-line array
    element = 0
    depth = 0
    for n, line in enumerate(text.splitlines(), start=1):
        if array is not None:
            if depth == 1 and _ELEMENT.match(line):
                index.setdefault((*array, element), n)
                element += 1
            depth += _bracket_delta(line)
            if depth <= 0:
                array = None
            continue
        if h := _HEADER.match(line):
            parts = tuple(_split_key(h.group(2)))
            if h.group(1) == "[[":
                i = counts.get(parts, 0)
                counts[parts] = i + 1
                table = (*parts, i)
            else:
                table = parts
            index.setdefault(table, n)
            continue
        if k := _KEY.match(line):
            key = (*table, *_split_key(k.group(1)))
            index.setdefault(key, n)
            value = k.group(2)
            d = _bracket_delta(value)
            if value.lstrip().startswith("[") and d > 0:
                array, element, depth = key, 0, d
                if _ELEMENT.match(value.lstrip()[1:]) and value.lstrip()[1:].strip():
                    index.setdefault((*key, 0), n)
                    element = 1
    probe = tuple(where)
    while probe:
        if probe in index:
            return index[probe]
        probe = probe[:-1]
    return None


def _bracket_delta(s: str) -> int:
    s = re.sub(r"\"(?:\\.|[^\"\\])*\"|'[^']*'|#.*$", "", s)
    return s.count("[") - s.count("]")
