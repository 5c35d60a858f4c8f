"""What may this call do: the expected-behaviour model the exec rules judge against.

`Expected.of(ctx, policy)` says which observed execs a call explains, and `effects(view, p)`
which security-relevant effects a process subtree had that the call does not explain. An
exec is *explained* by (in this order):

- **declared**: a command tool's declared command (a string, or an argv array such as
  `["ls", "-la"]`, one command), the shell running that script, and their descendants;
- **job**: the tool's declared job, read from its name words and schema keys: running code
  (`execute_python`: any interpreter), process inspection (`list_processes`: ps, kill),
  network diagnostics (`ping`, `traceroute`: ping, dig), system diagnostics (uname, df); a
  shell whose script runs only programs of the job is the job, and so are its descendants;
- **profile**: a `mtguard learn` profile of the tool lists the program;
- **baseline**: `baseline.ServerBaseline`, what this server executes on every call whatever the
  arguments (a runtime probe such as `sh -c 'python3 --version'`), learnt online from its
  first calls: an exec whose command line holds no argument text, seen in calls with
  different arguments, in allowed calls whose subtree had no security-relevant effect.

A shell or interpreter running is evidence, not a verdict. The exec rules deny an
unexplained (or baseline) subtree only for a security-relevant effect: a successful read
of a sensitive or canary path, a write of a sensitive, persistence or privileged path, or
outside the call's scope (argument paths, the workspace, home, temp), egress to an address
not derived from the arguments, task or allowlist, a privilege program, a signal or trace
aimed at a process outside the subtree, or a command line that matches a dangerous-shell
pattern or names such a path, when the arguments do not name it. Tool annotations are the
server's word: they only narrow (`readOnlyHint`: a write outside temp is relevant), never
widen.
"""

from __future__ import annotations

import fnmatch
import os.path
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model import ProcessNode
from .commands import exec_matches, peel, shell_payload, split_commands
from .patterns import HOME_RE, canonical_ip, domain_within, normalize_domain
from .policy import CANARY, PERSISTENCE, PRIVILEGED, SENSITIVE, Policy, basename
from .text import leaf_key, names_path
from .treeview import describe, is_write, label

if TYPE_CHECKING:
    from .baseline import ServerBaseline
    from .context import CallContext
    from .treeview import TreeView

ARGV_LISTS = frozenset({"args", "argv", "arguments"})
OPERATORS = frozenset({"|", "||", "&&", ";", "&"})
# Builtins a server may wrap around a command without running anything else.
HARMLESS_BUILTINS = frozenset({"cd", "export", "set", "umask", "true", ":", "unset", "wait"})
# Declared jobs: words of a tool's name (or schema keys, for code) -> the programs the job runs.
CODE_WORDS = frozenset({"python", "py", "code", "script", "repl", "notebook", "jupyter",
                        "javascript", "js", "ruby", "perl", "interpreter", "snippet", "eval"})
CODE_KEYS = frozenset({"code", "source_code", "python_code", "snippet", "program"})
JOBS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "processes": (
        frozenset({"process", "processes", "proc", "procs", "ps", "pid", "pids", "kill", "top"}),
        frozenset({"ps", "pgrep", "pkill", "kill", "killall", "pidof", "top", "htop", "lsof",
                   "pstree", "fuser", "procps"}),
    ),
    "network": (
        frozenset({"ping", "traceroute", "tracert", "tracepath", "mtr", "dig", "nslookup", "dns",
                   "whois", "netstat", "ports", "port", "interfaces", "route", "connectivity"}),
        frozenset({"ping", "ping6", "traceroute", "traceroute6", "tracepath", "mtr", "dig",
                   "nslookup", "host", "whois", "netstat", "ss", "ip", "ifconfig", "route",
                   "arp"}),
    ),
    "diagnostics": (
        frozenset({"diagnostic", "diagnostics", "diagnose", "health", "healthcheck", "sysinfo",
                   "uptime", "disk", "memory", "cpu", "doctor", "system"}),
        frozenset({"uname", "df", "du", "free", "uptime", "lscpu", "lsblk", "lsmem", "vmstat",
                   "iostat", "hostname", "id", "whoami", "nproc", "ps", "top", "which", "date",
                   "sensors", "lsb_release"}),
    ),
}
# Text filters a job's pipeline may pass its output through (`ps aux | head -n 20`).
FILTERS = frozenset({"head", "tail", "grep", "egrep", "fgrep", "sort", "wc", "cut", "uniq", "tr",
                     "column", "cat", "echo", "printf"})
SIGNALLERS = frozenset({"kill", "pkill", "killall", "skill", "gdb", "strace", "ltrace"})
# Programs that only look at the paths they name (list, stat, print, compare): naming a
# persistence or privileged path changes nothing (a write would be its own file event), so
# only a secret or canary they name is an effect (`ls ~/.ssh`, `cat ~/.aws/credentials`).
LOOKERS = frozenset({"ls", "stat", "cat", "head", "tail", "wc", "file", "test", "[", "readlink",
                     "realpath", "du", "grep", "egrep", "fgrep", "diff", "cmp", "md5sum",
                     "sha256sum", "echo", "printf", "basename", "dirname"})
TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/dev", "/proc/self", "/run/user")
HOME_CACHES = (".cache", ".local/state", ".npm")
_TOKEN = re.compile(r"""[^\s'"`;|&<>()=,]+""")
_DISCARD = re.compile(r"\d?>>?\s*/dev/null|\d?>&\d")  # output thrown away: no write


def _name_words(tool: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", tool)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def tool_jobs(ctx: CallContext, policy: Policy) -> frozenset[str]:
    """The declared jobs of the called tool ("commands", "code", or a `JOBS` key)."""
    names = _name_words(ctx.call.tool)
    props = (ctx.input_schema or {}).get("properties")
    keys = {str(k).lower() for k in props} if isinstance(props, dict) else set()
    jobs = {job for job, (cue, _) in JOBS.items() if names & cue}
    if names & CODE_WORDS or keys & CODE_KEYS:
        jobs.add("code")
    if policy.is_command_tool(ctx.call.tool, ctx.input_schema):
        jobs.add("commands")
    return frozenset(jobs)


def _argv_text(value: list[Any]) -> str:
    return " ".join(w if w in OPERATORS else shlex.quote(w) for w in map(str, value))


def declared_commands(ctx: CallContext, policy: Policy) -> list[str]:
    """The command text(s) the call declared: a string, an argv array (one command), or a
    command plus an `args` list; the argument texts when no key carries a command."""
    args = ctx.call.arguments
    keys = policy.command_arguments
    texts: list[str] = []
    for key, value in args.items():
        if key.lower() in keys and isinstance(value, list) and value:
            if all(isinstance(v, str | int | float) for v in value):
                texts.append(_argv_text(value))
    texts.extend(
        t for k, t in ctx.arg_items
        if leaf_key(k).lower() in keys and not (k.endswith("]") and k.split("[")[0] in args)
    )
    for key, value in args.items():
        if key.lower() in ARGV_LISTS and isinstance(value, list):
            head = next((args[k] for k in args if k.lower() in keys), "")
            texts.append(shlex.join([str(head), *map(str, value)]).strip())
    return texts or ctx.arg_texts


def _squash(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Expected:
    """The expected behaviour of one call (see the module docstring)."""

    ctx: CallContext
    policy: Policy
    jobs: frozenset[str]
    declared_texts: list[str]
    declared: list[list[str]]
    home: str | None
    read_only: bool
    baseline: ServerBaseline | None
    _explained: dict[str, str | None] = field(default_factory=dict)
    _ips: set[str] | None = None

    @classmethod
    def of(cls, ctx: CallContext, policy: Policy) -> Expected:
        texts = declared_commands(ctx, policy)
        home = next((m.group(0) for c in ctx.canaries if (m := re.match(HOME_RE, c))), None)
        ann = ctx.annotations if isinstance(ctx.annotations, dict) else {}
        return cls(
            ctx=ctx,
            policy=policy,
            jobs=tool_jobs(ctx, policy),
            declared_texts=texts,
            declared=[w for t in texts for w in split_commands(t, policy.wrappers)],
            home=home,
            read_only=ann.get("readOnlyHint") is True,
            baseline=ctx.baseline if hasattr(ctx.baseline, "explains") else None,
        )

    @property
    def command_tool(self) -> bool:
        return "commands" in self.jobs

    # -- explanations ------------------------------------------------------------------------
    def _job_programs(self) -> set[str]:
        return {prog for job in self.jobs if job in JOBS for prog in JOBS[job][1]}

    def exec_why(self, exe: str, argv: list[str]) -> str | None:
        """Why one exec, taken alone, is expected: declared, job, profile, baseline, or None."""
        policy = self.policy
        peeled = peel(argv, policy.wrappers)
        shell = policy.is_shell(exe) or (bool(peeled) and policy.is_shell(peeled[0]))
        script = shell_payload(peeled) if shell else None
        if self.command_tool:
            if script is not None and self._script_is(script, self.declared, declared=True):
                return "declared"
            if exec_matches(exe, peeled, self.declared, self.home):
                return "declared"
        if "code" in self.jobs and shell:
            return "job"
        programs = self._job_programs()
        if programs:
            if basename(exe) in programs or (peeled and basename(peeled[0]) in programs):
                return "job"
            allowed = [[p] for p in programs | FILTERS]
            if script is not None and self._script_is(script, allowed, lead=programs):
                return "job"
        profile = policy.profile
        if profile is not None:
            tool = profile.tools.get((self.ctx.call.server, self.ctx.call.tool))
            if tool is not None and tool.exes.matches(exe):
                return "profile"
        if self.baseline is not None and self.baseline.explains(exe, argv):
            return "baseline"
        return None

    def _script_is(
        self,
        script: str,
        allowed: list[list[str]],
        declared: bool = False,
        lead: set[str] | None = None,
    ) -> bool:
        """The script is the declared command line, or runs only `allowed` commands and
        harmless builtins (a server may prepend `cd /workspace &&`), one of them a `lead`
        program when given (a job's pipeline: `ps aux | head`, not `cat` alone)."""
        if declared and any(_squash(script) in _squash(t) for t in self.declared_texts):
            return True
        cmds = split_commands(script, self.policy.wrappers)
        if lead is not None and not any(basename(w[0]) in lead for w in cmds):
            return False
        return bool(cmds) and all(
            w[0] in HARMLESS_BUILTINS
            or (exec_matches(w[0], w, allowed, self.home) if declared else
                any(basename(w[0]) == a[0] for a in allowed))
            for w in cmds
        )

    def why(self, view: TreeView, p: ProcessNode, exe: str, argv: list[str]) -> str | None:
        """Why an observed exec is expected. A declared or job *program* explains its
        descendants (a declared `make` runs `cc`); a shell or interpreter explains only itself,
        so what its script, rc files or code start must be explained on its own."""
        own = self.exec_why(exe, argv)
        if own is not None:
            return own
        for a in view.ancestors(p):
            if a.key not in self._explained:
                self._explained[a.key] = next(
                    (w for ae, aa in _own_execs(view, a)
                     if not self._is_shell(ae, aa) and (w := self.exec_why(ae, aa))
                     in ("declared", "job")),
                    None,
                )
            if self._explained[a.key] is not None:
                return self._explained[a.key]
        return None

    def _is_shell(self, exe: str, argv: list[str]) -> bool:
        peeled = peel(argv, self.policy.wrappers)
        return self.policy.is_shell(exe) or (bool(peeled) and self.policy.is_shell(peeled[0]))

    # -- effects -------------------------------------------------------------------------------
    def effects(self, view: TreeView, root: ProcessNode) -> list[str]:
        """The security-relevant effects of `root`'s subtree the call does not explain."""
        procs = list(subtree(view, root))
        pids = {p.pid for p in procs}
        out: list[str] = []
        for p in procs:
            for e in p.execs or []:
                if e.result == 0:
                    out.extend(self.command_effects(p, e.path, e.argv or [e.path], pids))
            for ev in p.files:
                if ev.result < 0:
                    continue  # a failed open is never a read, a refused write wrote nothing
                if not is_write(ev) and _own_state(ev.path):
                    continue  # a /proc walker (ps) reading the sandbox's own processes
                for path in filter(None, (ev.path, ev.target)):
                    why = self._file_effect(path, is_write(ev), ev.resolved, view)
                    if why:
                        out.append(f"{label(p)} {ev.op} {path} {describe(ev)}: {why}")
            for n in p.net:
                ip = canonical_ip(n.address) or n.address
                if n.egress and not self._ip_explained(view, ip, n.port):
                    out.append(f"{label(p)} {n.summary}: egress not derived from the call")
        return list(dict.fromkeys(out))

    def command_effects(
        self, p: ProcessNode, exe: str, argv: list[str], pids: set[int] | None = None
    ) -> list[str]:
        """What one exec's command line alone shows: a privilege program, a signal to another
        process, a dangerous pattern, a sensitive/persistence/canary path not in the args."""
        policy = self.policy
        line = shlex.join(argv)
        who = f"{label(p)} executed {line[:200]}"
        out: list[str] = []
        script = shell_payload(peel(argv, policy.wrappers)) if policy.is_shell(exe) else None
        commands = [peel(argv, policy.wrappers) or argv]
        commands += split_commands(script, policy.wrappers) if script else []
        for words in commands:
            prog = basename(words[0])
            if prog in policy.priv_programs or (words is argv and basename(exe) in
                                                policy.priv_programs):
                out.append(f"{who}: a privilege program ({prog})")
                break
        for words in commands:  # `kill` is a shell builtin: the script says it
            if basename(words[0]) in SIGNALLERS and not _targets_own(words, pids or {p.pid}) \
                    and not _probe(words):
                out.append(f"{who}: signals or traces another process")
                break
        text = " ".join(argv[1:])
        lowered = text.lower()
        for pat in policy.shell_patterns:
            if pat.search(text, lowered):
                out.append(f"{who}: {pat.name}")
                break
        # a command line of looking programs only (`ls ~/.config/systemd/user || echo none`)
        looks = ">" not in _DISCARD.sub("", text) and all(
            basename(w[0]) in LOOKERS or w[0] in HARMLESS_BUILTINS for w in commands[1:] or commands
        )
        for tok in _TOKEN.findall(text):
            path = self._expand(tok)
            if path is None:
                if any(c in tok for c in "*?[") and self._secret_glob(tok):
                    out.append(f"{who}: searches for secret files ({tok})")
                    break
                continue
            # the path, or a directory of secrets (`tar ~/.aws`, `ls ~/.ssh`)
            why = self._file_effect(path, False, True, named_only=not looks) or (
                self._file_effect(path + "/_", False, True, named_only=not looks)
                if path != "/" and not names_path(self.ctx.arg_texts, path) else None
            )
            if why:
                out.append(f"{who}: names {path} ({why})")
                break
        return out

    def _secret_glob(self, pattern: str) -> bool:
        """A name pattern (`find -name 'id_*'`) that matches a secret's file name: a canary's
        or the literal last component of a sensitive path glob."""
        if len(re.sub(r"[^A-Za-z0-9]", "", pattern)) < 2:
            return False  # `*`, `.*`: any file, no secret in particular
        names = {os.path.basename(c) for c in self.ctx.canaries}
        names.update(n for g in self.policy.sensitive.globs
                     if not any(c in (n := g.rsplit("/", 1)[-1]) for c in "*?["))
        return any(fnmatch.fnmatchcase(n, pattern) for n in names if n)

    def _expand(self, tok: str) -> str | None:
        if tok.startswith(("~/", "$HOME/", "${HOME}/")) and self.home:
            return os.path.normpath(self.home + tok[tok.index("/"):])
        return os.path.normpath(tok) if tok.startswith("/") else None

    def _file_effect(
        self,
        path: str,
        write: bool,
        absolute: bool,
        view: TreeView | None = None,
        named_only: bool = False,
    ) -> str | None:
        policy, ctx = self.policy, self.ctx
        path = path.rstrip("/") or "/"
        if not absolute and not path.startswith("/"):
            mask = policy.classify_text(path)
            canary = any(names_path([path], c) for c in ctx.canaries)
        else:
            mask = policy.classify(path)
            canary = path in ctx.canaries
        if canary and not policy.canary_write_only.matches(path):
            mask |= CANARY
        if write:
            mask &= SENSITIVE | PERSISTENCE | PRIVILEGED | CANARY
        elif not named_only:
            mask &= SENSITIVE | CANARY
        if mask and names_path(ctx.arg_texts, path):
            return None  # the call's own arguments name it
        if mask:
            kinds = [n for bit, n in ((CANARY, "canary"), (SENSITIVE, "sensitive"),
                                      (PERSISTENCE, "persistence"), (PRIVILEGED, "privileged"))
                     if mask & bit]
            return "/".join(kinds) + (" write" if write else "")
        if write and absolute and path.startswith("/") and not self._in_scope(path, view):
            return "write outside the call's scope" + (" (readOnlyHint)" if self.read_only else "")
        return None

    def _in_scope(self, path: str, view: TreeView | None) -> bool:
        if _under(path, TEMP_ROOTS):
            return True
        home = re.match(HOME_RE, path)
        if self.read_only:
            return home is not None and _under(path, [f"{home[0]}/{c}" for c in HOME_CACHES])
        if home is not None:
            return True
        scope = [t for t in self.ctx.arg_texts if t.startswith("/") and t != "/"]
        scope += [os.path.dirname(t) for t in scope]
        if view is not None:
            seeded = (p.cwd for p in view.tree.processes if p.learned == "seeded" and p.cwd)
            ws = next(seeded, None)
            if ws and ws != "/":
                scope.append(ws)  # the server's workspace
        return _under(path, [s.rstrip("/") for s in scope if len(s.rstrip("/")) > 1])

    def _ip_explained(self, view: TreeView, ip: str, port: int) -> bool:
        from .rules_net import allowed_names, exempt_destination  # rules_net -> ...: load lazily

        if exempt_destination(self.policy, view.tree.resolvers, ip, port):
            return True
        if self._ips is None:
            names = allowed_names(self.ctx, self.policy)
            ips = set(self.policy.allowed_addresses)
            ips.update(i for n in names if (i := canonical_ip(n)) is not None)
            dns = [d for p in view.tree.processes for d in p.dns] + list(view.tree.dns)
            for d in dns:
                if domain_within(normalize_domain(d.name), names):
                    ips.update(i for a in d.answers if (i := canonical_ip(a)) is not None)
            self._ips = ips
        return ip in self._ips


def _own_state(path: str | None) -> bool:
    from .rules_files import own_process_state  # rules_files -> rules_pre: load lazily

    return path is not None and own_process_state(path)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _probe(argv: list[str]) -> bool:
    """`kill -0 PID`: asks whether a process exists and delivers nothing (a signal the kernel
    delivers is judged by `process-control` from its own event)."""
    return basename(argv[0]) == "kill" and len(argv) > 1 and (
        argv[1] in ("-0", "-s0", "-n0") or argv[1:3] in (["-s", "0"], ["-n", "0"]))


def _targets_own(argv: list[str], pids: set[int]) -> bool:
    """A kill/trace whose every target is a pid of the subtree (a process stopping its own)."""
    targets = [a for a in argv[1:] if not a.startswith("-")]
    nums = [a for a in targets if a.isdigit()]
    return basename(argv[0]) in ("kill", "gdb", "strace", "ltrace") and bool(nums) and all(
        int(a) in pids for a in nums
    ) and len(nums) == len(targets)


def _own_execs(view: TreeView, p: ProcessNode) -> list[tuple[str, list[str]]]:
    return [(exe, argv) for q, exe, argv in view.execs if q.key == p.key]


def subtree(view: TreeView, root: ProcessNode) -> Iterator[ProcessNode]:
    """`root` and every process below it in the tree."""
    kids: dict[str, list[ProcessNode]] = {}
    for p in view.tree.processes:
        if p.parent:
            kids.setdefault(p.parent, []).append(p)
    stack, seen = [root], set()
    while stack:
        p = stack.pop()
        if p.key in seen:
            continue
        seen.add(p.key)
        yield p
        stack.extend(kids.get(p.key, []))


