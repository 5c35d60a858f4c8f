"""Learned behaviour profiles: what each tool's benign calls do, and who leaves that.

`learn_profiles(records)` reads allowed calls from an audit log and keeps, per server and
tool, the programs they executed, the paths they read and wrote, the endpoints they
connected to, the DNS names they looked up and how many processes they spawned. Concrete
values are generalised so the profile stays small and readable:

- `/home/<user>/...` and `/root/...` become `~/...`; paths under the server's working
  directory (its workspace, when that is not a home) become `{workspace}/...`;
- a path, program, host or address the call's own arguments name becomes `{argument}` (a
  file under an argument-named directory `{argument}/**`): what a filesystem or command
  tool touches follows from what it was asked;
- numbers become `*` (`/proc/1234/stat` -> `/proc/*/stat`, `python3.11` -> `python3.*`),
  and so do random-looking name parts (temp names, hashes, UUIDs);
- library trees are one pattern each: `<prefix>/lib/python3.*/**`, `<prefix>/site-packages/**`,
  `<prefix>/node_modules/**`;
- a directory with `COLLAPSE` or more distinct entries becomes `dir/*` (`dir/**` when some
  entry is itself a directory), never at the top two levels (`/etc`, `~`) except the temp
  roots and the workspace; ports in the ephemeral range become `*`, and so does the
  address of a port seen with `COLLAPSE` or more addresses.

`dump_profile` writes the TOML a human reviews; `load_profile` validates it (a bad file is a
`PolicyError` with file and line) and compiles it: `CompiledProfile.deviations(tree, args)`
lists what a call did outside its tool's profile, each item naming the evidence.
"""

from __future__ import annotations

import datetime as dt
import json
import os.path
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import PolicyError
from ..model import AuditRecord, BehaviorTree, ProcessNode, Violation
from .patterns import canonical_ip, domain_within, normalize_domain
from .text import iter_strings, names_path, url_hosts
from .treeview import MODIFYING_OPS, WRITE_FLAGS

if TYPE_CHECKING:
    from ..model import Mode
    from .context import CallContext
    from .policy import Policy
    from .treeview import TreeView

RULE = "profile-deviation"
FORMAT_VERSION = 1
COLLAPSE = 4  # distinct entries of one directory (or addresses of one port) -> a wildcard
ARG = "{argument}"
ARG_TREE = "{argument}/**"
WORKSPACE = "{workspace}"
TEMP_ROOTS = frozenset({"/tmp", "/var/tmp", "/dev/shm", WORKSPACE})
# Top-level directories of system code that may collapse as a whole (never /etc, ~, /proc).
SYSTEM_ROOTS = frozenset({"/lib", "/lib32", "/lib64", "/usr", "/sys"})
# Reads that loading a program makes (libraries, locales, loader cache): listed last.
SYSTEM_CODE = ("/usr/", "/lib", "/etc/ld.so.", "/proc/self/", "/sys/", "/dev/null")
EPHEMERAL_PORTS = range(32768, 65536)
MAX_EVIDENCE = 12
CACHE_SIZE = 16384

_HOME = re.compile(r"^(?:/home/[^/]+|/root)(?=/|$)")
_NUMBER = re.compile(r"(?<![^./\-])\d+(?![^./\-])")  # a whole number between . - / or ends
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"^(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{8,}$", re.I)
_DIGIT_GROUPS = re.compile(r"\d+")
_TEMPFILE = re.compile(r"(?=[a-z0-9_]*(?:^[0-9_]|[0-9_][a-z]))[a-z0-9_]{8}")  # mkdtemp suffix
_LETTERS = re.compile(r"[A-Za-z]")
# Library trees collapse to one pattern: everything after the anchor is code, not data.
_ANCHORS = re.compile(r"/(?:lib/python\d+\.\d+|site-packages|dist-packages|node_modules)(?=/)")


# -- the profile file -----------------------------------------------------------------------
class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class ProfileHeader(_Strict):
    version: int = FORMAT_VERSION
    generator: str = "mtguard learn"
    learned_from: str = ""
    learned_at: str = ""
    calls: int = 0  # calls learned from
    skipped: int = 0  # records of the log not learned from
    min_calls: int = 1


class ToolProfile(_Strict):
    calls: int = 0
    max_processes: int = 0
    exes: list[str] = msgspec.field(default_factory=list)
    read: list[str] = msgspec.field(default_factory=list)
    write: list[str] = msgspec.field(default_factory=list)
    endpoints: list[str] = msgspec.field(default_factory=list)
    dns: list[str] = msgspec.field(default_factory=list)


class ServerProfile(_Strict):
    tools: dict[str, ToolProfile] = msgspec.field(default_factory=dict)


class ProfileSpec(_Strict):
    profile: ProfileHeader = msgspec.field(default_factory=ProfileHeader)
    servers: dict[str, ServerProfile] = msgspec.field(default_factory=dict)


# -- what one call did ----------------------------------------------------------------------
@dataclass(slots=True)
class CallFacts:
    """What one call did, deduplicated: raw absolute paths, programs, endpoints, names, each
    with the process that first did it (for evidence), and what its arguments name."""

    workspace: str | None
    texts: list[str]  # the argument strings
    hosts: set[str]
    exes: dict[str, str] = field(default_factory=dict)  # program -> who ran it
    reads: dict[str, str] = field(default_factory=dict)  # raw absolute path -> who
    writes: dict[str, str] = field(default_factory=dict)
    endpoints: dict[tuple[str, int], str] = field(default_factory=dict)
    dns: set[str] = field(default_factory=set)
    answers: dict[str, set[str]] = field(default_factory=dict)  # ip -> names resolving to it
    processes: int = 0


def _who(p: ProcessNode) -> str:
    return f"pid {p.pid} {os.path.basename(p.exe) or (p.argv[0] if p.argv else '?')}"


def _workspace(tree: BehaviorTree) -> str | None:
    """The server's working directory, when it is a workspace (not a home, not /)."""
    for p in tree.processes:
        if p.learned == "seeded" and p.cwd:
            cwd = p.cwd.rstrip("/")
            if cwd and not _HOME.fullmatch(cwd):
                return cwd
            return None
    return None


def _programs(p: ProcessNode, by_key: Mapping[str, ProcessNode]) -> list[str]:
    """What an observed process executed (a fork running its parent's program: nothing)."""
    if p.learned != "observed":
        return []
    done = [e.path for e in p.execs if e.result == 0]
    if done or p.execs:
        return done
    parent = by_key.get(p.parent or "")
    return [p.exe] if p.exe and (parent is None or parent.exe != p.exe) else []


def call_facts(tree: BehaviorTree, arguments: Mapping[str, Any]) -> CallFacts:
    texts = [t for _, t in iter_strings(dict(arguments))]
    hosts = {h for t in texts for h in url_hosts(t)}
    hosts.update(ip for t in texts if (ip := canonical_ip(t.strip())) is not None)
    facts = CallFacts(workspace=_workspace(tree), texts=texts, hosts=hosts)
    by_key = {p.key: p for p in tree.processes}
    reads, writes = facts.reads, facts.writes
    for p in tree.processes:
        who = _who(p)
        if p.learned == "observed":
            facts.processes += 1
        for exe in _programs(p, by_key):
            facts.exes.setdefault(exe, who)
        cwd = p.cwd or "/"
        for ev in p.files:  # the hot loop (a browser call has 30,000 events): keep it flat
            path, op = ev.path, ev.op
            if op == "open":
                out = reads if not ev.flags or WRITE_FLAGS.isdisjoint(ev.flags) else writes
            else:
                out = writes if op in MODIFYING_OPS else reads
            if path in out and ev.target is None:
                continue
            for raw in (path, ev.target):
                if raw:
                    if raw[0] != "/":
                        raw = os.path.normpath(os.path.join(cwd, raw))
                    elif raw[-1] == "/" and raw != "/":
                        raw = raw.rstrip("/")
                    if raw not in out:
                        out[raw] = who
        for n in p.net:
            if n.egress:  # connects and sends; not a datagram socket's connect that sent nothing
                facts.endpoints.setdefault((canonical_ip(n.address) or n.address, n.port), who)
        for d in p.dns:
            _dns(facts, d.name, d.answers)
    for d in tree.dns:
        _dns(facts, d.name, d.answers)
    return facts


def _dns(facts: CallFacts, name: str, answers: list[str]) -> None:
    host = normalize_domain(name)
    if host:
        facts.dns.add(host)
    for a in answers:
        if (ip := canonical_ip(a)) is not None:
            facts.answers.setdefault(ip, set()).add(host)


def normalise(path: str, workspace: str | None) -> str:
    """`~/...` for homes, `{workspace}/...` for the workspace; other paths unchanged."""
    if workspace and (path == workspace or path.startswith(workspace + "/")):
        return WORKSPACE + path[len(workspace) :]
    m = _HOME.match(path)
    return "~" + path[m.end() :] if m else path


def _argument_path(facts: CallFacts, path: str) -> str | None:
    """ARG when the arguments name `path`, ARG_TREE when they name a directory above it."""
    if not facts.texts:
        return None
    if names_path(facts.texts, path):
        return ARG
    parent = os.path.dirname(path)
    for _ in range(4):
        if parent in ("/", "") or _HOME.fullmatch(parent) or parent == facts.workspace:
            break
        if names_path(facts.texts, parent):
            return ARG_TREE
        parent = os.path.dirname(parent)
    return None


def _argument_host(facts: CallFacts, address: str) -> bool:
    if address in facts.hosts:
        return True
    names = facts.answers.get(address, ())
    return any(domain_within(n, facts.hosts) for n in names)


# -- generalisation -------------------------------------------------------------------------
def _random(token: str) -> bool:
    """A temp-name / hash / random suffix: hex of 8+; Python's 8-character temp suffix with a
    digit or _ before a letter (`r352k41_`, `u4mwsvim`); or 6+ chars with 3+ letters and two
    or more separate digit groups (`0ihbxko0`, `tmpk3j4_x9a`; not `x86_64`, `sha256sum`)."""
    if _HEX.match(token) or _TEMPFILE.fullmatch(token):
        return True
    return (
        len(token) >= 6
        and len(_LETTERS.findall(token)) >= 3
        and len(_DIGIT_GROUPS.findall(token)) >= 2
    )


def generalise_component(part: str) -> str:
    if part in ("~", WORKSPACE, "**"):
        return part
    part = _UUID.sub("*", part)
    pieces = re.split(r"([.\-])", part)
    part = "".join("*" if i % 2 == 0 and _random(p) else p for i, p in enumerate(pieces))
    part = _NUMBER.sub("*", part)
    return re.sub(r"\*+", "*", part)


def generalise_path(path: str) -> str:
    """One normalised path as a pattern (numbers, random names, library trees)."""
    m = _ANCHORS.search(path)
    if m is not None:
        path = path[: m.end()] + "/**"
    parts = path.split("/")
    return "/".join(generalise_component(p) if p else p for p in parts)


def _split(pattern: str) -> list[str]:
    if pattern.startswith("/"):
        return ["/", *[p for p in pattern[1:].split("/") if p]]
    return [p for p in pattern.split("/") if p]


def _join(parts: list[str]) -> str:
    if parts and parts[0] == "/":
        return "/" + "/".join(parts[1:])
    return "/".join(parts)


Trie = dict[str, "Trie"]
LEAF = ""  # marks "this node is itself a path"


def collapse(patterns: Iterable[str], threshold: int = COLLAPSE) -> list[str]:
    """Patterns merged into a trie; a directory with `threshold`+ entries becomes `*`/`**`."""
    root: Trie = {}
    special: set[str] = set()
    for pattern in patterns:
        if pattern in (ARG, ARG_TREE):
            special.add(pattern)
            continue
        node = root
        for part in _split(pattern):
            node = node.setdefault(part, {})
        node[LEAF] = {}
    out: list[str] = []
    _walk(root, [], threshold, out)
    return sorted(special) + sorted(set(out))


def _walk(node: Trie, prefix: list[str], threshold: int, out: list[str]) -> None:
    if LEAF in node and prefix:
        out.append(_join(prefix))
    children = {k: v for k, v in node.items() if k != LEAF}
    if "**" in children:
        out.append(_join([*prefix, "**"]))
        return
    joined = _join(prefix)
    depth = len(prefix) - (1 if prefix and prefix[0] == "/" else 0)
    if len(children) >= threshold and (
        depth >= 2 or joined in TEMP_ROOTS or joined in SYSTEM_ROOTS
    ):
        deep = any(k != LEAF for child in children.values() for k in child)
        out.append(_join([*prefix, "**" if deep else "*"]))
        return
    for name, child in children.items():
        _walk(child, [*prefix, name], threshold, out)


def _endpoint(address: str, port: int | str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{host}:{port}"


@dataclass(slots=True)
class _ToolLearner:
    calls: int = 0
    max_processes: int = 0
    exes: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)
    write: set[str] = field(default_factory=set)
    endpoints: set[tuple[str, int | str]] = field(default_factory=set)
    dns: set[str] = field(default_factory=set)

    def add(self, facts: CallFacts) -> None:
        self.calls += 1
        self.max_processes = max(self.max_processes, facts.processes)
        for exe in facts.exes:
            named = ARG if names_path(facts.texts, exe) else None
            self.exes.add(named or generalise_path(normalise(exe, facts.workspace)))
        for raw, out in ((facts.reads, self.read), (facts.writes, self.write)):
            for path in raw:
                named = _argument_path(facts, path)
                out.add(named or generalise_path(normalise(path, facts.workspace)))
        for address, port in facts.endpoints:
            p: int | str = "*" if port in EPHEMERAL_PORTS else port
            self.endpoints.add((ARG if _argument_host(facts, address) else address, p))
        for name in facts.dns:
            self.dns.add(ARG if domain_within(name, facts.hosts) else name)

    def profile(self) -> ToolProfile:
        by_port: dict[int | str, set[str]] = {}
        for address, port in self.endpoints:
            by_port.setdefault(port, set()).add(address)
        endpoints: set[str] = set()
        for port, addresses in by_port.items():
            if len(addresses - {ARG}) >= COLLAPSE:
                addresses = {"*"}
            endpoints.update(_endpoint(a, port) for a in addresses)
        write = collapse(self.write)
        covered = GlobSet(write)  # a read the write patterns already allow is not repeated
        return ToolProfile(
            calls=self.calls,
            max_processes=self.max_processes,
            exes=collapse(self.exes),
            read=[g for g in collapse(self.read - self.write) if not covered.matches(g)],
            write=write,
            endpoints=sorted(endpoints),
            dns=_collapse_names(self.dns),
        )


def _collapse_names(names: set[str]) -> list[str]:
    """`COLLAPSE`+ names under one parent domain become `*.parent`."""
    by_parent: dict[str, set[str]] = {}
    for n in names:
        parent = ".".join(n.split(".")[-2:]) if n != ARG else ARG
        by_parent.setdefault(parent, set()).add(n)
    out: set[str] = set()
    for parent, group in by_parent.items():
        out.update({f"*.{parent}"} if len(group) >= COLLAPSE and parent != ARG else group)
    return sorted(out)


@dataclass(slots=True)
class LearnStats:
    used: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> records
    dropped_tools: list[str] = field(default_factory=list)  # server.tool under min_calls


def learnable(record: AuditRecord, require_allowed: bool = True) -> str | None:
    """Why a record cannot be learned from, or None: only allowed calls with a traced tree
    (an observe-mode record that would have been denied is not benign evidence).
    `require_allowed=False` (evaluation only: calls known benign) keeps denied calls too."""
    if require_allowed and record.decision != "allow":
        return f"decision {record.decision}" + (
            " (observe mode)" if record.mode == "observe" else ""
        )
    if require_allowed and any(v.mode == "enforce" for v in record.violations):
        return "an enforcing rule fired"
    if record.tree is None or not record.tree.traced:
        return "no behavior tree"
    return None


def learn_profiles(
    records: Iterable[AuditRecord],
    *,
    min_calls: int = 1,
    source: str = "",
    now: dt.datetime | None = None,
    require_allowed: bool = True,
) -> tuple[ProfileSpec, LearnStats]:
    if min_calls < 1:
        raise ValueError("min_calls must be at least 1")
    learners: dict[str, dict[str, _ToolLearner]] = {}
    stats = LearnStats()
    for record in records:
        why = learnable(record, require_allowed)
        if why is not None:
            stats.skipped[why] += 1
            continue
        assert record.tree is not None
        tools = learners.setdefault(record.server, {})
        tools.setdefault(record.tool, _ToolLearner()).add(call_facts(record.tree, record.arguments))
        stats.used += 1
    spec = ProfileSpec(
        profile=ProfileHeader(
            learned_from=source,
            learned_at=(now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            calls=stats.used,
            skipped=sum(stats.skipped.values()),
            min_calls=min_calls,
        )
    )
    for server in sorted(learners):
        kept = ServerProfile()
        for tool in sorted(learners[server]):
            learner = learners[server][tool]
            if learner.calls < min_calls:
                stats.dropped_tools.append(f"{server}.{tool} ({learner.calls} call(s))")
                continue
            kept.tools[tool] = learner.profile()
        if kept.tools:
            spec.servers[server] = kept
    return spec, stats


# -- the TOML file --------------------------------------------------------------------------
def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _list(key: str, values: list[str]) -> list[str]:
    if not values:
        return [f"{key} = []"]
    if len(values) <= 2 and sum(map(len, values)) < 60:
        return [f"{key} = [{', '.join(map(_q, values))}]"]
    return [f"{key} = [", *(f"  {_q(v)}," for v in values), "]"]


def dump_profile(spec: ProfileSpec) -> str:
    h = spec.profile
    lines = [
        "# mtguard learned behaviour profile: review it, then enforce it with",
        '#   [rules.profile-deviation] profile = "<this file>"  mode = "enforce"',
        "# Patterns: ~ any home, {workspace} the server's working directory, {argument} what",
        "# the call's arguments name; * within one name, ** any depth. Edit freely.",
        "",
        "[profile]",
        f"version = {h.version}",
        f"generator = {_q(h.generator)}",
        f"learned_from = {_q(h.learned_from)}",
        f"learned_at = {_q(h.learned_at)}",
        f"calls = {h.calls}",
        f"skipped = {h.skipped}",
        f"min_calls = {h.min_calls}",
    ]
    for server, sp in spec.servers.items():
        for tool, tp in sp.tools.items():
            lines += ["", f"[servers.{_q(server)}.tools.{_q(tool)}]"]
            lines += [f"calls = {tp.calls}", f"max_processes = {tp.max_processes}"]
            for key in ("exes", "read", "write", "endpoints", "dns"):
                lines += _list(key, getattr(tp, key))
    return "\n".join(lines) + "\n"


# -- compiled matcher -----------------------------------------------------------------------
def _glob_regex(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append(r"(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(r".*")
            i += 2
        elif glob[i] == "*":
            out.append(r"[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append(r"[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def _check_glob(glob: str, where: tuple[str | int, ...]) -> str:
    if glob in (ARG, ARG_TREE):
        return glob
    if not glob or glob != glob.strip() or "//" in glob:
        raise _Bad(where, f"path pattern {glob!r} is empty, has spaces around it or '//'")
    if not glob.startswith(("/", "~/", "**/", WORKSPACE + "/")) and glob not in ("~", WORKSPACE):
        raise _Bad(where, f"path pattern {glob!r} must start with /, ~/, **/ or {WORKSPACE}/")
    return normalise(glob, None)  # a literal /home/<user>/x is ~/x, as observed paths are


class _Bad(ValueError):
    def __init__(self, where: tuple[str | int, ...], why: str) -> None:
        self.where, self.why = where, why
        super().__init__(why)


def _head(path: str) -> str:
    """The first component a path or glob starts with (`/usr/lib` -> `/usr`, `~/x` -> `~`)."""
    if path.startswith("/"):
        cut = path.find("/", 1)
        return path if cut < 0 else path[:cut]
    cut = path.find("/")
    return path if cut < 0 else path[:cut]


class GlobSet:
    """Globs as anchored regexes over normalised paths, one per first component (a path is
    tried only against the globs that can match its start, plus those starting with a
    wildcard), so a profile's size barely matters."""

    def __init__(self, globs: Iterable[str]) -> None:
        globs = list(globs)
        self.argument = ARG in globs
        self.argument_tree = ARG_TREE in globs
        by_head: dict[str, list[str]] = {}
        for g in globs:
            if g in (ARG, ARG_TREE):
                continue
            head = _head(g)
            by_head.setdefault("" if any(c in head for c in "*?") else head, []).append(g)
        wild = by_head.pop("", [])
        self._by_head = {h: _compile([*gs, *wild]) for h, gs in by_head.items()}
        self._wild = _compile(wild) if wild else None

    def matches(self, path: str) -> bool:
        rx = self._by_head.get(_head(path), self._wild)
        return rx is not None and rx.match(path) is not None


def _compile(globs: list[str]) -> re.Pattern[str]:
    return re.compile("^(?:" + "|".join(_glob_regex(g) for g in globs) + ")$")


class CompiledTool:
    __slots__ = ("caches", "dns", "dns_rx", "endpoints", "exes", "read", "spec", "write")

    def __init__(self, spec: ToolProfile, where: tuple[str | int, ...]) -> None:
        self.spec = spec
        # (workspace, write) -> raw path -> allowed: a path is matched once, then looked up
        self.caches: dict[tuple[str | None, bool], dict[str, bool]] = {}
        if spec.max_processes < 0:
            raise _Bad((*where, "max_processes"), "must be 0 or more")
        for key in ("exes", "read", "write"):
            for i, g in enumerate(getattr(spec, key)):
                _check_glob(g, (*where, key, i))
        norm = {
            k: [_check_glob(g, ()) for g in getattr(spec, k)] for k in ("exes", "read", "write")
        }
        self.exes = GlobSet(norm["exes"])
        self.read = GlobSet(norm["read"] + norm["write"])  # what a call may write it may read
        self.write = GlobSet(norm["write"])
        self.endpoints: set[tuple[str, str]] = set()
        for i, e in enumerate(spec.endpoints):
            self.endpoints.add(_parse_endpoint(e, (*where, "endpoints", i)))
        self.dns = {d.lower() for d in spec.dns}
        plain = [d for d in self.dns if d != ARG]
        for i, d in enumerate(spec.dns):
            if not d or " " in d or "/" in d:
                raise _Bad((*where, "dns", i), f"{d!r} is not a DNS name pattern")
        self.dns_rx = (
            re.compile(
                "^(?:" + "|".join(re.escape(d).replace(r"\*", "[^ ]*") for d in plain) + ")$"
            )
            if plain
            else None
        )


def _parse_endpoint(text: str, where: tuple[str | int, ...]) -> tuple[str, str]:
    m = re.fullmatch(r"(\[[^\]]+\]|[^:\[\]]+):(\*|\d{1,5})", text.strip())
    if m is None or (m.group(2) != "*" and not 0 < int(m.group(2)) < 65536):
        raise _Bad(where, f"endpoint {text!r} is not ADDRESS:PORT (port a number or *)")
    host = m.group(1).strip("[]")
    if host not in ("*", ARG):
        ip = canonical_ip(host)
        if ip is None:
            raise _Bad(where, f"endpoint {text!r}: {host!r} is not an IP address, * or {ARG}")
        host = ip
    return host, m.group(2)


class CompiledProfile:
    """A validated profile: `deviations(server, tool, tree, arguments)` in microseconds
    (every distinct path is matched once per workspace and then answered from a cache)."""

    def __init__(self, spec: ProfileSpec, source: str = "") -> None:
        if spec.profile.version != FORMAT_VERSION:
            raise _Bad(("profile", "version"), f"unsupported version {spec.profile.version}")
        self.spec = spec
        self.source = source
        self.tools: dict[tuple[str, str], CompiledTool] = {}
        for server, sp in spec.servers.items():
            for tool, tp in sp.tools.items():
                self.tools[(server, tool)] = CompiledTool(tp, ("servers", server, "tools", tool))
        self.servers = set(spec.servers)

    def missing(self, server: str, tool: str) -> str | None:
        """Why there is no profile for this call, or None."""
        if server not in self.servers:
            return f"no profile for server {server!r}"
        if (server, tool) not in self.tools:
            return f"no profile for {server}.{tool}"
        return None

    def deviations(
        self, server: str, tool: str, tree: BehaviorTree, arguments: Mapping[str, Any]
    ) -> list[str]:
        t = self.tools.get((server, tool))
        if t is None:
            return []
        return _deviations(t, call_facts(tree, arguments))


def _deviations(t: CompiledTool, facts: CallFacts) -> list[str]:
    """Every deviation, most telling first: process count, programs, endpoints, names,
    writes, reads, and last the system-code reads an unexpected program makes by loading."""
    ws = facts.workspace
    out: list[str] = []
    if facts.processes > t.spec.max_processes:
        out.append(
            f"spawned {facts.processes} process(es); the profile's maximum is "
            f"{t.spec.max_processes}"
        )
    for exe, who in facts.exes.items():
        if t.exes.matches(normalise(exe, ws)):
            continue
        if t.exes.argument and names_path(facts.texts, exe):
            continue
        out.append(f"executed {exe} ({who}): not a program of this tool's profile")
    for (address, port), who in facts.endpoints.items():
        ports = (str(port), "*")
        if any((a, p) in t.endpoints for a in (address, "*") for p in ports):
            continue
        if any((ARG, p) in t.endpoints for p in ports) and _argument_host(facts, address):
            continue
        out.append(
            f"connected to {_endpoint(address, port)} ({who}): not an endpoint of the profile"
        )
    for name in sorted(facts.dns):
        if name in t.dns or (t.dns_rx is not None and t.dns_rx.match(name)):
            continue
        if ARG in t.dns and domain_within(name, facts.hosts):
            continue
        out.append(f"looked up {name}: not a DNS name of the profile")
    system: list[str] = []
    for paths, write in ((facts.writes, True), (facts.reads, False)):
        gs = t.write if write else t.read
        cache = t.caches.get((ws, write))
        if cache is None or len(cache) >= CACHE_SIZE:
            cache = t.caches[(ws, write)] = {}
        for path, who in paths.items():
            ok = cache.get(path)
            if ok is None:
                ok = cache[path] = gs.matches(normalise(path, ws))
            if ok:
                continue
            if gs.argument or gs.argument_tree:
                named = _argument_path(facts, path)
                if (named == ARG and gs.argument) or (named is not None and gs.argument_tree):
                    continue
            line = f"{'wrote' if write else 'read'} {path} ({who}): outside the profile's paths"
            (system if not write and path.startswith(SYSTEM_CODE) else out).append(line)
    return out + system


# -- loading --------------------------------------------------------------------------------
def load_profile(path: str | os.PathLike[str]) -> CompiledProfile:
    """Parse, validate and compile a profile file; any problem is a `PolicyError` naming
    the file and (where it can be found) the line."""
    from .loader import _parse_where, locate  # the loader imports the policy, which imports us

    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(name, None, f"cannot read the profile: {exc}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise PolicyError(name, int(m.group(1)) if m else None, str(exc)) from exc
    if "profile" not in raw:
        raise PolicyError(name, None, "not a behaviour profile: it has no [profile] table")

    def convert(value: Any, kind: type[Any], where: tuple[str | int, ...]) -> Any:
        try:
            return msgspec.convert(value, kind)
        except msgspec.ValidationError as exc:  # dict keys are `[...]` in msgspec's path
            at = (*where, *_parse_where(str(exc)))
            raise PolicyError(name, locate(text, at), str(exc)) from exc

    spec = ProfileSpec(profile=convert(raw.pop("profile"), ProfileHeader, ("profile",)))
    servers = raw.pop("servers", {})
    if raw:
        key = next(iter(raw))
        raise PolicyError(name, locate(text, (key,)), f"unknown table or key `{key}`")
    if not isinstance(servers, dict):
        raise PolicyError(name, locate(text, ("servers",)), "`servers` must be a table")
    for server, sp in servers.items():
        where = ("servers", server)
        if (
            not isinstance(sp, dict)
            or set(sp) - {"tools"}
            or not isinstance(sp.get("tools", {}), dict)
        ):
            raise PolicyError(name, locate(text, where), "a server table holds only `tools`")
        kept = spec.servers.setdefault(server, ServerProfile())
        for tool, tp in sp.get("tools", {}).items():
            kept.tools[tool] = convert(tp, ToolProfile, (*where, "tools", tool))
    try:
        return CompiledProfile(spec, name)
    except _Bad as exc:
        raise PolicyError(name, locate(text, exc.where), exc.why) from exc


def profile_skip(server: str, tool: str, profile: CompiledProfile | None) -> str | None:
    """None: check this call; "": no profile is configured (skip silently); else why not."""
    if profile is None:
        return ""
    return profile.missing(server, tool)


def deviation_violation(
    profile: CompiledProfile,
    server: str,
    tool: str,
    tree: BehaviorTree,
    arguments: Mapping[str, Any],
    mode: Mode,
) -> list[Violation]:
    found = profile.deviations(server, tool, tree, arguments)
    if not found:
        return []
    evidence = found[:MAX_EVIDENCE]
    if len(found) > MAX_EVIDENCE:
        evidence.append(f"... and {len(found) - MAX_EVIDENCE} more")
    return [
        Violation(
            rule=RULE,
            phase="post",
            mode=mode,
            reason=f"{server}.{tool} did what its learned profile never saw",
            evidence=evidence,
        )
    ]


def profile_deviation(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    """The post rule: the call's tree against its tool's learned profile (`profile_skip`
    says which calls the engine does not give it)."""
    if policy.profile is None:
        return []
    call = ctx.call
    return deviation_violation(
        policy.profile, call.server, call.tool, view.tree, call.arguments, policy.mode_of(RULE)
    )
