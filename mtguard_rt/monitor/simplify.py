"""`simplify(tree, noise)`: the compact behavior tree the LLM judge sees.

Keeps every process with its identity and command, and every effect except what the noise
rules (data in `policies/noise.toml`) call noise: read-only opens of bytecode, import
artefacts, shared libraries and locale data; PATH-search exec failures; loopback traffic;
signals a process sent to itself or its own threads.
What was left out is counted per rule in `tree.omitted`, so the compact view never hides
that something was there. The raw tree is not modified.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import tomllib
from pathlib import Path

import msgspec

from ..errors import PolicyError
from ..model import BehaviorTree, ExecEvent, FileEvent, NetEvent, ProcessNode

ENOENT = 2


class FileNoise(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    read_globs: list[str] = msgspec.field(default_factory=list)


class ExecNoise(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    drop_path_search: bool = True


class NetNoise(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    drop_loopback: bool = True


class NoiseRules(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    files: FileNoise = msgspec.field(default_factory=FileNoise)
    exec: ExecNoise = msgspec.field(default_factory=ExecNoise)
    net: NetNoise = msgspec.field(default_factory=NetNoise)

    def is_read_noise(self, ev: FileEvent) -> bool:
        if ev.op != "open" or not ev.resolved or set(ev.flags) - {"read"}:
            return False
        return _compiled(tuple(self.files.read_globs)).match(ev.path) is not None


@functools.lru_cache(maxsize=8)
def _compiled(globs: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(fnmatch.translate(g) for g in globs) or r"(?!)")


def default_noise_path() -> Path:
    pkg = Path(__file__).resolve().parent.parent
    for candidate in (pkg.parent / "policies" / "noise.toml", pkg / "_policies" / "noise.toml"):
        if candidate.is_file():
            return candidate
    raise PolicyError(str(pkg.parent / "policies" / "noise.toml"), None, "file not found")


def load_noise(path: Path | None = None) -> NoiseRules:
    """Parse and validate a noise file; errors name the file (and line when TOML knows it)."""
    path = path or default_noise_path()
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        why = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise PolicyError(str(path), int(m.group(1)) if m else None, why) from exc
    except OSError as exc:
        raise PolicyError(str(path), None, exc.strerror or str(exc)) from exc
    try:
        return msgspec.convert(data, NoiseRules)
    except msgspec.ValidationError as exc:
        raise PolicyError(str(path), _line_of(path, str(exc)), str(exc)) from exc


def _line_of(path: Path, message: str) -> int | None:
    """Best effort: the line of the first key the validation message names."""
    m = re.search(r"`\$\.(?:\w+\.)*(\w+)`|field `(\w+)`", message)
    key = (m.group(1) or m.group(2)) if m else None
    if key:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(rf"\s*\[?{re.escape(key)}\b", line):
                return n
    return None


def _loopback(ev: NetEvent) -> bool:
    return ev.address.startswith("127.") or ev.address in ("::1", "::ffff:127.0.0.1")


def _execs(execs: list[ExecEvent], omitted: dict[str, int]) -> list[ExecEvent]:
    out = []
    for i, ev in enumerate(execs):
        later = execs[i + 1 :]
        if ev.result == -ENOENT and any(e.argv == ev.argv and e.result == 0 for e in later):
            omitted["exec_path_search"] = omitted.get("exec_path_search", 0) + 1
            continue
        out.append(ev)
    return out


def simplify(tree: BehaviorTree, noise: NoiseRules) -> BehaviorTree:
    omitted: dict[str, int] = dict(tree.omitted)
    procs: list[ProcessNode] = []
    for p in tree.processes:
        files = []
        for f in p.files:
            if noise.is_read_noise(f):
                omitted["file_read_noise"] = omitted.get("file_read_noise", 0) + 1
            else:
                files.append(f)
        net = p.net
        if noise.net.drop_loopback:
            net = [n for n in p.net if not _loopback(n)]
            if len(net) != len(p.net):
                omitted["loopback"] = omitted.get("loopback", 0) + len(p.net) - len(net)
        execs = _execs(p.execs, omitted) if noise.exec.drop_path_search else p.execs
        # a runtime signalling its own threads (GC, preemption, profilers) says nothing
        signals = [s for s in p.signals if s.relation != "self"]
        if len(signals) != len(p.signals):
            omitted["signal_self"] = omitted.get("signal_self", 0) + len(p.signals) - len(signals)
        procs.append(
            msgspec.structs.replace(p, files=files, net=net, execs=execs, signals=signals)
        )
    # the stdio capture is evidence for the integrity rules, not for a reader (or a judge's
    # prompt): it repeats the arguments and the server's own output verbatim
    return msgspec.structs.replace(tree, processes=procs, omitted=omitted, stdio=None)
