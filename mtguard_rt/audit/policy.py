"""A loaded policy: the validated spec plus every pattern compiled once, ready for rules.

`Policy(spec)` compiles globs, regexes and name lists; a bad pattern raises `SpecError`
with the key path that holds it (the loader turns that into a file and line). Rules read
compiled fields only, so per-call work is matching, never compiling.
"""

from __future__ import annotations

import fnmatch
import os.path
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..model import Mode
from .names import stem, synonym_groups
from .patterns import GlobError, PathSet, canonical_ip
from .spec import NamedPattern, PinAction, PolicySpec

if TYPE_CHECKING:
    from .profile import CompiledProfile

KeyPath = tuple[str | int, ...]
# (kind name, token regex, argument-key globs, finder in any text)
# (kind, token pattern, argument-key globs, anywhere pattern, open choice)
EntityMatcher = tuple[
    str, re.Pattern[str], re.Pattern[str] | None, re.Pattern[str] | None, bool
]
SENSITIVE, PERSISTENCE, PRIVILEGED, CANARY = 1, 2, 4, 8  # path classes (a bitmask)
CLASSIFY_CACHE_SIZE = 16384  # distinct absolute paths remembered between calls


class SpecError(ValueError):
    def __init__(self, where: KeyPath, why: str) -> None:
        self.where = where
        self.why = why
        super().__init__(f"{'.'.join(map(str, where))}: {why}")


def _paths(globs: list[str], where: KeyPath) -> PathSet:
    for i, g in enumerate(globs):
        try:
            PathSet([g])
        except GlobError as exc:
            raise SpecError((*where, i), str(exc)) from exc
    return PathSet(globs)


def _regex(pattern: str, where: KeyPath, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise SpecError(where, f"invalid regular expression {pattern!r}: {exc}") from exc


def scoped(pattern: str) -> str:
    """`pattern` as a group that can be joined with others: leading global flags such as
    `(?i)` become scoped ones, `(?i:...)` (global flags are refused mid-expression)."""
    m = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    return f"(?{m.group(1)}:{pattern[m.end() :]})" if m else f"(?:{pattern})"


def _any_regex(patterns: list[str], where: KeyPath, flags: int = 0) -> re.Pattern[str] | None:
    for i, p in enumerate(patterns):
        _regex(scoped(p), (*where, i), flags)
    return re.compile("|".join(scoped(p) for p in patterns), flags) if patterns else None


class Named:
    """A compiled named pattern with its trigger literals (see `NamedPattern`)."""

    __slots__ = ("name", "regex", "triggers")

    def __init__(self, name: str, regex: re.Pattern[str], triggers: tuple[str, ...]) -> None:
        self.name, self.regex, self.triggers = name, regex, triggers

    def search(self, text: str, lowered: str) -> re.Match[str] | None:
        if self.triggers and not any(t in lowered for t in self.triggers):
            return None
        return self.regex.search(text)


def _named(patterns: list[NamedPattern], where: KeyPath) -> list[Named]:
    return [
        Named(
            p.name,
            _regex(p.regex, (*where, i, "regex"), re.I),
            tuple(t.lower() for t in p.triggers),
        )
        for i, p in enumerate(patterns)
    ]


def _name_globs(globs: Iterable[str]) -> re.Pattern[str] | None:
    parts = [fnmatch.translate(g.lower()) for g in globs]
    return re.compile("|".join(parts)) if parts else None


def basename(path: str) -> str:
    return os.path.basename(path.rstrip("/"))


class Policy:
    """The guard's policy, compiled. Construct with `load_policy()`, or from a spec."""

    def __init__(self, spec: PolicySpec, sources: Iterable[str] = ()) -> None:
        self.spec = spec
        self.sources = tuple(sources)
        lists, rules = spec.lists, spec.rules
        self.sensitive = _paths(lists.sensitive_paths, ("lists", "sensitive_paths"))
        self.sensitive_args = PathSet(
            [
                *lists.sensitive_paths,
                *_paths(
                    rules.sensitive_file_arg.extra_paths,
                    ("rules", "sensitive-file-arg", "extra_paths"),
                ).globs,
            ]
        )
        self.secrets = _any_regex(
            rules.sensitive_file_arg.secret_patterns,
            ("rules", "sensitive-file-arg", "secret_patterns"),
        )
        self.injection_patterns = _named(
            rules.result_injection.patterns, ("rules", "result-injection", "patterns")
        )
        self.persistence = _paths(lists.persistence_paths, ("lists", "persistence_paths"))
        for key in ("housekeeping_paths", "log_paths"):  # compiled by rules_state; checked here
            _paths(getattr(lists, key), ("lists", key))
        self.shells = {basename(s) for s in lists.shells}
        self.interpreters = {basename(s) for s in lists.interpreters}
        self.command_tools = _name_globs(lists.command_tools)
        self.command_arguments = {a.lower() for a in lists.command_arguments}
        self.allowed_domains = [d.lower() for d in lists.allowed_domains]

        ds = rules.dangerous_shell
        self.shell_patterns = _named(ds.patterns, ("rules", "dangerous-shell", "patterns"))
        ssh = rules.ssh_persistence
        self.ssh_paths = _paths(ssh.paths, ("rules", "ssh-persistence", "paths"))
        self.ssh_keys = _any_regex(ssh.key_patterns, ("rules", "ssh-persistence", "key_patterns"))
        self.bare_tlds = [t.lower().lstrip(".") for t in rules.off_task_url.bare_domain_tlds]

        te = rules.task_entity_mismatch
        self.entities: list[EntityMatcher] = []
        for i, e in enumerate(te.entities):
            where: KeyPath = ("rules", "task-entity-mismatch", "entities", i)
            token = _regex(scoped(e.pattern), (*where, "pattern"))
            anywhere = _regex(e.anywhere, (*where, "anywhere")) if e.anywhere else None
            self.entities.append((e.name, token, _name_globs(e.keys), anywhere, e.open_choice))
        self.aliases = {k.upper(): {w.lower() for w in v} for k, v in te.aliases.items()}

        rc = rules.repeated_call
        if rc.threshold < 2:
            raise SpecError(("rules", "repeated-call", "threshold"), "must be at least 2")
        self.navigation_tools = _name_globs(rc.navigation_tools)
        self.navigation_arguments = {a.lower() for a in rc.navigation_arguments}

        ic = rules.induced_call
        where_ic: KeyPath = ("rules", "induced-call")
        self.obligation_cues = _any_regex(ic.obligation_cues, (*where_ic, "obligation_cues"), re.I)
        self.override_cues = _any_regex(ic.override_cues, (*where_ic, "override_cues"), re.I)
        if ic.min_token_length < 1:
            raise SpecError((*where_ic, "min_token_length"), "must be at least 1")
        self.generic_name_words = frozenset(w.lower() for w in lists.generic_name_words)
        for i, w in enumerate(lists.generic_name_words):
            if not re.fullmatch(r"[A-Za-z0-9]+", w):
                raise SpecError(
                    ("lists", "generic_name_words", i), f"{w!r} is not one word (letters, digits)"
                )
        lt = rules.lookalike_tool
        for key in ("praise_words", "vague_nouns"):
            for i, w in enumerate(getattr(lt, key)):
                if not re.fullmatch(r"[A-Za-z0-9]+", w):
                    raise SpecError(
                        ("rules", "lookalike-tool", key, i),
                        f"{w!r} is not one word (letters, digits)",
                    )
        self.praise_words = frozenset(w.lower() for w in lt.praise_words)
        self.synonyms = synonym_groups(lists.name_synonyms)
        self.change_words = frozenset(stem(w) for w in ic.change_words)
        self.content_keys = frozenset(k.lower() for k in ic.content_keys)
        self.vague_nouns = frozenset(w.lower() for w in lt.vague_nouns)
        self.superiority = _any_regex(
            lt.superiority_patterns, ("rules", "lookalike-tool", "superiority_patterns"), re.I
        )

        self.canary_write_only = _paths(
            rules.canary_touched.write_only, ("rules", "canary-touched", "write_only")
        )
        self.wrappers = {basename(w) for w in rules.command_mismatch.wrappers}
        pe = rules.privilege_escalation
        self.priv_programs = {basename(p) for p in pe.programs}
        self.priv_paths = _paths(pe.paths, ("rules", "privilege-escalation", "paths"))
        self.priv_commands = _any_regex(
            pe.command_patterns, ("rules", "privilege-escalation", "command_patterns")
        )
        net = rules.unexpected_network
        self.allowed_addresses: set[str] = set()
        for i, a in enumerate(net.allowed_addresses):
            ip = canonical_ip(a)
            if ip is None:
                raise SpecError(
                    ("rules", "unexpected-network", "allowed_addresses", i), f"{a!r} is not an IP"
                )
            self.allowed_addresses.add(ip)
        self.allowed_ports = set(net.allowed_ports)
        self.profile: CompiledProfile | None = None  # learned behaviour (profile-deviation)
        if rules.profile_deviation.profile:
            from .profile import load_profile  # profile -> treeview -> policy: load lazily

            self.profile = load_profile(rules.profile_deviation.profile)
        self._classes: dict[str, int] = {}
        self._classed = (
            (SENSITIVE, self.sensitive),
            (PERSISTENCE, self.persistence),
            (PRIVILEGED, self.priv_paths),
        )
        if any(paths.always for _, paths in self._classed):
            self._any_keys: frozenset[str] = frozenset()
            self._any_prefixes: tuple[str, ...] = ("",)  # every path passes the prefilter
        else:
            self._any_keys = frozenset().union(*(paths.keys for _, paths in self._classed))
            self._any_prefixes = tuple(p for _, paths in self._classed for p in paths.prefixes)

    def classify(self, path: str) -> int:
        """The classes of an absolute path (SENSITIVE | PERSISTENCE | PRIVILEGED), cached."""
        mask = self._classes.get(path)
        if mask is None:
            parts = path.split("/")
            mask = 0
            if self._any_keys.isdisjoint(parts) and not path.startswith(self._any_prefixes):
                pass  # no glob of any class can match: the common case
            else:
                for bit, paths in self._classed:
                    if paths.matches(path, parts):
                        mask |= bit
            if len(self._classes) >= CLASSIFY_CACHE_SIZE:
                self._classes.clear()
            self._classes[path] = mask
        return mask

    def classify_text(self, name: str) -> int:
        """The classes of a path as a process wrote it (relative: matched by its tail)."""
        return (
            (SENSITIVE if self.sensitive.mention(name) else 0)
            | (PERSISTENCE if self.persistence.mention(name) else 0)
            | (PRIVILEGED if self.priv_paths.mention(name) else 0)
        )

    @property
    def observe(self) -> bool:
        return self.spec.guard.mode == "observe"

    @property
    def pinning_action(self) -> PinAction:
        return self.spec.guard.pinning_action

    @property
    def judge_policies(self) -> list[str]:
        return list(self.spec.rules.llm_judge.policies)

    def mode_of(self, rule_id: str) -> Mode:
        return self.spec.rules.mode_of(rule_id)

    def use_profile(self, path: str, mode: Mode | None = None) -> None:
        """Check calls against the learned profile at `path` (GuardConfig's `[profile]`)."""
        from .profile import load_profile

        self.profile = load_profile(path)
        self.spec.rules.profile_deviation.profile = path
        if mode is not None:
            self.spec.rules.profile_deviation.mode = mode

    def is_command_tool(self, tool: str, input_schema: dict[str, Any] | None = None) -> bool:
        """A tool whose declared job is running commands: by name, or by a command argument."""
        if self.command_tools is not None and self.command_tools.match(tool.lower()):
            return True
        props = (input_schema or {}).get("properties")
        return isinstance(props, dict) and any(
            str(k).lower() in self.command_arguments for k in props
        )

    def is_shell(self, exe: str) -> bool:
        name = basename(exe)
        return name in self.shells or name in self.interpreters or _versioned(name, self)


def _versioned(name: str, policy: Policy) -> bool:
    """python3.11, perl5.36, node18: an interpreter name with a version suffix."""
    stem = name.rstrip("0123456789.")
    return stem != name and stem in policy.interpreters
