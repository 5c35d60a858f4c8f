"""Pre-execution rules (the paper's seven, plus `rules_provenance`'s two and `rules_params`'s
one) over the declared call: pure functions.

Each rule takes `(ctx, policy)` and returns zero or one `Violation` (all its evidence in one
record, each line naming the argument and the exact text). Rules that compare against the
user's intent (`NEEDS_TASK`) are skipped by the engine when the call has no task.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

from ..model import DeclaredCall, Violation
from .carried import sanctioned
from .context import CallContext
from .intent import acting_clauses
from .names import COMPETES, captures, confusable, tells_apart, words_of
from .patterns import canonical_ip, domain_within
from .policy import Policy
from .provenance import STOP_WORDS
from .rules_flow import secret_flow
from .rules_lookalike import lookalike_tool, versions
from .rules_params import out_of_scope_param
from .rules_persist import persistence_arg
from .rules_provenance import induced_call
from .text import bare_hosts, leaf_key, names_path, url_hosts

MAX_EVIDENCE = 10
_canonical = msgspec.json.Encoder(order="sorted", enc_hook=str)


def violation(rule: str, policy: Policy, phase: str, reason: str, evidence: list[str]) -> Violation:
    return Violation(
        rule=rule,
        phase="pre" if phase == "pre" else "post",
        mode=policy.mode_of(rule),
        reason=reason,
        evidence=evidence[:MAX_EVIDENCE],
    )


def _snip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _texts(ctx: CallContext, min_length: int) -> Iterator[tuple[str, str]]:
    """(where, text) for every argument string and every payload decoded from one."""
    for key, text in ctx.arg_items:
        yield f"argument {key!r}", text
    for key, enc, dec in ctx.decoded(min_length):
        yield f"argument {key!r} (decoded from {enc})", dec


def _task_asks_for(ctx: CallContext, text: str, hit: str) -> bool:
    """Does the user's task name the sensitive file an argument names (`hit`, as the task
    spells it: "create the app's .env from .env.example")? Never for an argument that names
    a canary: canary secrets are never legitimately read, whoever asks."""
    task = ctx.task_text
    if not task or any(names_path([text], canary) for canary in ctx.canaries):
        return False
    return re.search(rf"(?<![\w.\-]){re.escape(hit)}(?![\w.\-])", task) is not None


def _spells_out(text: str, path: str) -> bool:
    """Does `text` write out the absolute `path`, or its home-relative form (~/, $HOME/)?
    A bare name (".env") in prose is a kind of file, not that canary."""
    parts = path.split("/")
    rel = "/".join(parts[3:]) if len(parts) > 3 and parts[1] in ("home", "root") else None
    if parts[1:2] == ["root"]:
        rel = "/".join(parts[2:])
    forms = [path, *([f"~/{rel}", f"$HOME/{rel}", f"${{HOME}}/{rel}"] if rel else [])]
    return any(f in text for f in forms)


def sensitive_file_arg(ctx: CallContext, policy: Policy) -> list[Violation]:
    """Arguments that name a sensitive file the task does not ask for, or already carry
    secret material (a canary's marker, private-key or cloud-key patterns): exfiltration
    through the call itself. A non-command tool's prose (`_written_prose`: a thought saying
    "never from a committed .env file") only talks about a file it names, unless a canary."""
    ev: list[str] = []
    command_tool = policy.is_command_tool(ctx.call.tool, ctx.input_schema)
    prose = {
        f"argument {key!r}"
        for key, text in ctx.arg_items
        if _written_prose(key, text, command_tool)
        and not any(_spells_out(text, canary) for canary in ctx.canaries)
    }
    for where, text in _texts(ctx, policy.spec.rules.dangerous_shell.decode_min_length):
        if (
            (hit := policy.sensitive_args.mention(text))
            and where not in prose
            and not _task_asks_for(ctx, text, hit)
        ):
            ev.append(f"{where} names {hit!r}")
        for path, marker in ctx.canaries.items():
            if marker and marker in text:
                ev.append(f"{where} carries the content of canary {path}")
        if policy.secrets is not None and (m := policy.secrets.search(text)):
            ev.append(f"{where} carries secret material {_snip(m.group(0), 40)!r}")
    if not ev:
        return []
    reason = "arguments name a sensitive file or carry secret material"
    return [violation("sensitive-file-arg", policy, "pre", reason, ev)]


MIN_TYPED = 3  # characters of a dangerous command the task must hold to have typed it


def dangerous_shell(ctx: CallContext, policy: Policy) -> list[Violation]:
    """Arguments hold a dangerous shell command, unless the user typed that very command in
    a clause of the task that orders something ("Add an alias 'please' for sudo")."""
    ev: list[str] = []
    negations = frozenset(policy.spec.lists.change_negations)
    orders = acting_clauses(ctx.task_text, negations) if ctx.task_text else []
    for where, text in _texts(ctx, policy.spec.rules.dangerous_shell.decode_min_length):
        lowered = text.lower()
        for pattern in policy.shell_patterns:
            if m := pattern.search(text, lowered):
                typed = m.group(0).strip().lower()
                if len(typed) >= MIN_TYPED and any(typed in c for c in orders):
                    continue  # the user's own command
                ev.append(f"{where}: {pattern.name}: {_snip(m.group(0))!r}")
    return (
        [
            violation(
                "dangerous-shell", policy, "pre", "arguments hold a dangerous shell command", ev
            )
        ]
        if ev
        else []
    )


def ssh_persistence(ctx: CallContext, policy: Policy) -> list[Violation]:
    """Arguments that name an SSH access file or carry key material. The user's own key,
    which the task spells out with the file it goes to, is a consent (recorded, observe):
    every key and SSH path the arguments hold is in the task, verbatim."""
    ev: list[str] = []
    task, asked = ctx.task_text or "", True
    for where, text in _texts(ctx, policy.spec.rules.dangerous_shell.decode_min_length):
        if hit := policy.ssh_paths.mention(text):
            ev.append(f"{where} names {hit!r}")
            asked = asked and hit in task
        elif policy.ssh_keys is not None and (m := policy.ssh_keys.search(text)):
            ev.append(f"{where} holds SSH key material or target {_snip(m.group(0), 60)!r}")
        if policy.ssh_keys is not None:
            asked = asked and all(k.group(0) in task for k in policy.ssh_keys.finditer(text))
    if not ev:
        return []
    if asked and policy.ssh_keys is not None and policy.ssh_keys.search(task):
        why = "the user's own SSH key, to the file the task names: allowed"
        return [
            Violation(rule="ssh-persistence", phase="pre", mode="observe", reason=why, evidence=ev)
        ]
    return [violation("ssh-persistence", policy, "pre", "arguments would plant SSH access", ev)]


# Argument names whose multi-word text is prose or a file's content: a URL inside it is
# something written or thought about ("see https://debezium.io/..."; a config file's
# DATABASE_URL), not where the call goes. Only for tools that do not run commands.
_PROSE_KEYS = re.compile(
    r"thoughts?|reasoning|notes?|comments?|summary|description|contents?|text|body|message|"
    r"observations?",
    re.I,
)


def _written_prose(key: str, text: str, command_tool: bool) -> bool:
    return (
        not command_tool
        and _PROSE_KEYS.fullmatch(leaf_key(key)) is not None
        and len(text.split()) > 1
    )


# A file edit's pair of texts (old_string/new_string, search/replace): the old text is what
# the file says now; a host the new text shares with it is kept, not introduced by the call.
_EDIT_OLD = re.compile(r"old[_-]?(string|str|text|content|value)?|search|find|original", re.I)
_EDIT_NEW = re.compile(r"new[_-]?(string|str|text|content|value)?|replace(ment)?|updated", re.I)


def _edited_hosts(ctx: CallContext, policy: Policy) -> set[str]:
    """Hosts named by the old text of an edit in this call."""
    return {
        host
        for key, text in ctx.arg_items
        if _EDIT_OLD.fullmatch(leaf_key(key))
        for host in [*url_hosts(text), *bare_hosts(text, policy.bare_tlds)]
    }


def off_task_url(ctx: CallContext, policy: Policy) -> list[Violation]:
    """Arguments that point to a domain neither the task nor the allowlist names. A URL in
    a non-command tool's prose or file content (`_written_prose`) is data, not a target."""
    task_hosts = ctx.task_hosts
    task_text = (ctx.task_text or "").lower()
    command_tool = policy.is_command_tool(ctx.call.tool, ctx.input_schema)
    kept = _edited_hosts(ctx, policy) if not command_tool else set()
    ev: list[str] = []
    for key, text in ctx.arg_items:
        if _written_prose(key, text, command_tool):
            continue
        if not command_tool and _EDIT_OLD.fullmatch(leaf_key(key)):
            continue  # the text an edit replaces: what the file says now, not a target
        for host in dict.fromkeys([*url_hosts(text), *bare_hosts(text, policy.bare_tlds)]):
            if domain_within(host, policy.allowed_domains) or domain_within(host, task_hosts):
                continue
            if host in kept and _EDIT_NEW.fullmatch(leaf_key(key)):
                continue  # the edit keeps a host the file already names: it adds none
            if any(domain_within(t, [host]) for t in task_hosts):
                continue  # the task names a subdomain of it
            if canonical_ip(host) is not None and host in task_text:
                continue
            ev.append(
                f"argument {key!r} points to {host!r}, named neither by the task nor the allowlist"
            )
    return (
        [
            violation(
                "off-task-url", policy, "pre", "arguments reach a domain the task does not name", ev
            )
        ]
        if ev
        else []
    )


def shadowed_tool(ctx: CallContext, policy: Policy) -> list[Violation]:
    """Across servers: the same or a confusable name. On any server (the same included): a
    look-alike of another tool (case, separators, homoglyphs) or a name built to capture
    another tool's calls. Near names on one server (`get_user`, `get_users`) are normal, and
    so is a server's own versioned tool (`download_v2` beside its `download`: `versions`)."""
    spec = policy.spec.rules.shadowed_tool
    affixes = frozenset(a.lower() for a in spec.capture_affixes)
    tool, server = ctx.call.tool, ctx.call.server
    ev: list[str] = []
    for other_server, names in ctx.tools_by_server.items():
        same = other_server == server
        if not same and _instances(ctx, other_server):
            continue  # the same listing twice: its pairs are judged within this server's own
        for other in names:
            if same and other == tool:
                continue
            why = confusable(tool, other, spec.max_edit_distance, spec.min_length)
            if same and why is not None and why.startswith("edit distance"):
                why = None
            if same and versions(tool, other):
                continue  # the server's own next version of its tool, not a capture
            if why == "identical name" and _collision(ctx, policy, other_server):
                why = None
            if why is None and captures(tool, other, affixes):
                why = "built to capture its calls (the same name plus a persuasive affix)"
            if why is not None:
                ev.append(f"tool {tool!r} on {server!r} vs {other!r} on {other_server!r}: {why}")
    if not ev:
        return []
    reason = "the tool name shadows or imitates another tool"
    return [violation("shadowed-tool", policy, "pre", reason, ev)]


def _instances(ctx: CallContext, other_server: str) -> bool:
    """Two instances of one server (a user's `fs-work` and `fs-home`): the two list the same
    tools (two or more: one tool copied is a shadow), each with the same description and
    parameters. A shadow adds its tool to a listing of its own. Limit: a server that copies a
    whole listing of another is taken for an instance of it (docs/BYPASSES.md)."""
    mine = ctx.tools_by_server.get(ctx.call.server, [])
    theirs = ctx.tools_by_server.get(other_server, [])
    if len(mine) < 2 or sorted(mine) != sorted(theirs):
        return False
    for name in mine:
        a = ctx.untrusted.tool(ctx.call.server, name)
        b = ctx.untrusted.tool(other_server, name)
        if a is None or b is None or (a.description, a.properties) != (b.description, b.properties):
            return False
    return True


def _collision(ctx: CallContext, policy: Policy, other_server: str) -> bool:
    """Two servers' tools of one generic name, each described as its own job and neither
    competing for the other's calls (`names.tells_apart`, `names.COMPETES`): not shadowing."""
    tool = ctx.call.tool
    mine = ctx.untrusted.tool(ctx.call.server, tool)
    theirs = ctx.untrusted.tool(other_server, tool)
    if mine is None or theirs is None:
        return False  # no descriptions to tell them apart by
    descs = (mine.description, theirs.description)
    sup = policy.superiority
    if any(COMPETES.search(d) or (sup is not None and sup.search(d)) for d in descs):
        return False
    return tells_apart(*descs, tool, STOP_WORDS | policy.generic_name_words)


def _mentioned(token: str, ctx: CallContext, policy: Policy) -> bool:
    low = token.lower()
    if low in ctx.task_words or low in (ctx.task_text or "").lower():
        return True
    return bool(policy.aliases.get(token.upper(), set()) & ctx.task_words)


def _task_names_any(
    ctx: CallContext, token_rx: re.Pattern[str], anywhere: re.Pattern[str] | None, policy: Policy
) -> bool:
    """Whether the task names at least one entity of a kind (a token, a $TOKEN, an alias).
    One-letter tokens do not count: "I" and "A" start sentences far more often than tickers."""
    text = ctx.task_text or ""
    if anywhere is not None and anywhere.search(text):
        return True
    for token in re.split(r"[\s,;:()\[\]\"'!?]+", text):
        if len(token) > 1 and token_rx.fullmatch(token.rstrip(".")):
            return True
    return any(names & ctx.task_words for names in policy.aliases.values())


def task_entity_mismatch(ctx: CallContext, policy: Policy) -> list[Violation]:
    """Arguments name an entity (a recipient, an account, a ticker) the task does not, and
    that no result the task told the agent to consult holds as data (`carried.sanctioned`:
    "email Ana, her address is in the address book")."""
    ev: list[str] = []
    for kind, token_rx, keys, anywhere, open_choice in policy.entities:
        if open_choice and not _task_names_any(ctx, token_rx, anywhere, policy):
            continue
        found: dict[str, str] = {}
        for key, text in ctx.arg_items:
            if keys is not None and keys.match(leaf_key(key).lower()):
                for token in text.replace(",", " ").replace(";", " ").split():
                    if token_rx.fullmatch(token) or token_rx.fullmatch(token.upper()):
                        found.setdefault(token, key)
            if anywhere is not None:
                for m in anywhere.finditer(text):
                    found.setdefault(m.group(0).lstrip("$"), key)
        ev.extend(
            f"argument {key!r} holds {kind} {token!r}, which the task never mentions"
            for token, key in found.items()
            if not _mentioned(token, ctx, policy) and not sanctioned(token, ctx, policy)
        )
    return (
        [
            violation(
                "task-entity-mismatch",
                policy,
                "pre",
                "arguments name entities the task does not",
                ev,
            )
        ]
        if ev
        else []
    )


def _call_key(call: DeclaredCall, policy: Policy) -> str:
    args = call.arguments
    if policy.navigation_tools is not None and policy.navigation_tools.match(call.tool.lower()):
        nav = {k: v for k, v in args.items() if k.lower() in policy.navigation_arguments}
        args = nav or args
    return f"{call.server}\0{call.tool}\0{_canonical.encode(args).decode()}"


# Words of a tool name that say it only looks (`git_status`, `list_issues`, `read_file`):
# such a call between two identical ones changed nothing, so together they may be a loop.
READ_ONLY_WORDS = frozenset(
    "get list ls read show status search find fetch query describe view diff log logs check "
    "count inspect lookup retrieve info stat stats ping peek preview print cat head tail "
    "browse snapshot screenshot explain history version help".split()
)


def _changes_state(call: DeclaredCall, ctx: CallContext) -> bool:
    """May `call` have changed what a repeated query answers? Unless its tool says it is
    read-only (annotation `readOnlyHint`, or a looking word in its name: `git_status`)."""
    info = ctx.untrusted.tool(call.server, call.tool)
    if info is not None and info.read_only:
        return False
    return READ_ONLY_WORDS.isdisjoint(words_of(call.tool))


def repeated_call(ctx: CallContext, policy: Policy) -> list[Violation]:
    """The same call again and again with nothing in between that changed state: a loop or
    a flood. A status query repeated after a state-changing call (`git_status`, `git_add`,
    `git_status`) asks a new question: the count restarts at such a call."""
    spec = policy.spec.rules.repeated_call
    recent = [c for c in ctx.recent_calls if c.call_id != ctx.call.call_id][-spec.window :]
    key = _call_key(ctx.call, policy)
    same = looked = 0
    for c in reversed(recent):
        if _call_key(c, policy) == key:
            same += 1
        elif _changes_state(c, ctx):
            break
        looked += 1
    if same + 1 < spec.threshold:
        return []
    ev = [f"{same + 1} identical calls of {ctx.call.tool!r} within the last {looked + 1} calls"]
    return [
        violation("repeated-call", policy, "pre", "the same call repeats (a loop or a flood)", ev)
    ]


PRE_RULES = (
    ("sensitive-file-arg", sensitive_file_arg),
    ("dangerous-shell", dangerous_shell),
    ("ssh-persistence", ssh_persistence),
    ("persistence-write", persistence_arg),
    ("off-task-url", off_task_url),
    ("shadowed-tool", shadowed_tool),
    ("task-entity-mismatch", task_entity_mismatch),
    ("repeated-call", repeated_call),
    ("induced-call", induced_call),
    ("lookalike-tool", lookalike_tool),
    ("secret-flow", secret_flow),
    ("out-of-scope-param", out_of_scope_param),
)
NEEDS_TASK = frozenset({"off-task-url", "task-entity-mismatch", "induced-call"})
