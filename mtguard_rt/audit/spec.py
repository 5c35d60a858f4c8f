"""The policy file schema: msgspec structs, every field defaulted, unknown keys rejected.

A policy file is TOML: `[guard]` (global mode, pinning action), `[lists]` (vocabularies
several rules share: sensitive paths, persistence locations, allowlisted domains, shells,
command-running tools) and one `[rules.<id>]` table per rule with its `mode` and its own
lists. Every field has a default so a layer may set only what it changes.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ..model import Mode

PinAction = Literal["deny", "observe", "allow"]


class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class GuardSpec(_Strict):
    mode: Literal["enforce", "observe"] = "enforce"
    pinning_action: PinAction = "deny"


class ListsSpec(_Strict):
    sensitive_paths: list[str] = msgspec.field(default_factory=list)
    persistence_paths: list[str] = msgspec.field(default_factory=list)
    allowed_domains: list[str] = msgspec.field(default_factory=list)
    shells: list[str] = msgspec.field(default_factory=list)
    interpreters: list[str] = msgspec.field(default_factory=list)
    command_tools: list[str] = msgspec.field(default_factory=list)  # globs on tool names
    command_arguments: list[str] = msgspec.field(default_factory=list)  # keys holding a command
    # Kill on touch (enforce mode): exact absolute paths whose open, and programs whose exec,
    # the kernel answers with SIGKILL (canaries are always protected). Exact strings only.
    protected_paths: list[str] = msgspec.field(default_factory=list)
    forbidden_executables: list[str] = msgspec.field(default_factory=list)
    # Words of tool names that say nothing about what a tool is for (get, fetch, tool, data):
    # dropped when names are compared by meaning (induced-call, lookalike-tool).
    generic_name_words: list[str] = msgspec.field(default_factory=list)
    # Groups of words that name the same job (send/forward/mail, message/email, delete/remove):
    # a tool name and a task, or two tool names, that use different words of one group mean
    # the same thing (induced-call, lookalike-tool, task-entity-mismatch).
    name_synonyms: list[list[str]] = msgspec.field(default_factory=list)
    # Task intent (audit/intent.py): verbs by which a task asks for a change, the words that
    # cancel one just before it ("do not delete") and the question words that make an
    # inflected one a question ("what changed"), the determiners that make a bare one a noun
    # ("my address book"); and for `unrequested-change`, paths whose
    # change is housekeeping (caches, locks, journals) and logs a call may append to.
    change_verbs: list[str] = msgspec.field(default_factory=list)
    change_negations: list[str] = msgspec.field(default_factory=list)
    question_words: list[str] = msgspec.field(default_factory=list)
    determiners: list[str] = msgspec.field(default_factory=list)
    delegation_words: list[str] = msgspec.field(default_factory=list)  # "follow setup.md"
    housekeeping_paths: list[str] = msgspec.field(default_factory=list)
    log_paths: list[str] = msgspec.field(default_factory=list)
    destructive_words: list[str] = msgspec.field(default_factory=list)  # destructive-call


class NamedPattern(_Strict):
    name: str
    regex: str
    # Lower-case literals one of which every match contains: the regex runs only on text
    # (lower-cased) that holds one, which keeps long arguments and results cheap to scan.
    triggers: list[str] = msgspec.field(default_factory=list)


class EntitySpec(_Strict):
    name: str
    pattern: str  # a token of this kind (matched whole, case-sensitive)
    keys: list[str] = msgspec.field(default_factory=list)  # argument keys (globs) to look in
    anywhere: str | None = None  # a regex that finds it in any argument text (e.g. $TSLA)
    # True: a task that names no entity of this kind leaves the choice to the agent ("compare
    # two tech stocks"), so there is nothing to mismatch and the check is skipped.
    open_choice: bool = False


class RuleSpec(_Strict):
    mode: Mode = "enforce"


class SensitiveFileArgSpec(RuleSpec):
    extra_paths: list[str] = msgspec.field(default_factory=list)
    secret_patterns: list[str] = msgspec.field(default_factory=list)  # key material in args


class ResultInjectionSpec(RuleSpec):
    mode: Mode = "observe"
    patterns: list[NamedPattern] = msgspec.field(default_factory=list)


class DangerousShellSpec(RuleSpec):
    patterns: list[NamedPattern] = msgspec.field(default_factory=list)
    decode_min_length: int = 16  # shortest base64/hex run worth decoding


class SshPersistenceSpec(RuleSpec):
    paths: list[str] = msgspec.field(default_factory=list)
    key_patterns: list[str] = msgspec.field(default_factory=list)


class OffTaskUrlSpec(RuleSpec):
    bare_domain_tlds: list[str] = msgspec.field(default_factory=list)


class ShadowedToolSpec(RuleSpec):
    max_edit_distance: int = 1
    min_length: int = 5  # names shorter than this are compared for equality only
    capture_affixes: list[str] = msgspec.field(default_factory=list)


class TaskEntitySpec(RuleSpec):
    entities: list[EntitySpec] = msgspec.field(default_factory=list)
    aliases: dict[str, list[str]] = msgspec.field(default_factory=dict)


class RepeatedCallSpec(RuleSpec):
    threshold: int = 3
    window: int = 20
    navigation_tools: list[str] = msgspec.field(default_factory=list)
    navigation_arguments: list[str] = msgspec.field(default_factory=list)


class InducedCallSpec(RuleSpec):
    # Regexes (case-insensitive) that make a sentence of untrusted text an instruction to the
    # agent: `obligation_cues` to call a tool ("you must first call", "instead"), and
    # `override_cues` to change an argument ("ignore the user's", "regardless of").
    obligation_cues: list[str] = msgspec.field(default_factory=list)
    override_cues: list[str] = msgspec.field(default_factory=list)
    min_token_length: int = 3  # shorter argument words (and numbers under 2 digits) never count
    # Words of a tool's name that say it changes or sends something (delete, write, send):
    # such a call's targets taken from another server's text are induced (`audit/carried.py`).
    change_words: list[str] = msgspec.field(default_factory=list)
    # Argument keys whose value is carried content (a body, a text), not a target.
    content_keys: list[str] = msgspec.field(default_factory=list)


class LookalikeToolSpec(RuleSpec):
    # Name words and description phrases (regexes, case-insensitive) by which a tool
    # advertises itself over others: "best_", "premium version", "trusted by".
    praise_words: list[str] = msgspec.field(default_factory=list)
    superiority_patterns: list[str] = msgspec.field(default_factory=list)
    # Nouns that name no particular thing (data, info): ignored when names are compared.
    vague_nouns: list[str] = msgspec.field(default_factory=list)


class ParamKindSpec(_Strict):
    """A kind of data a parameter may ask for that few tools' jobs need (`out-of-scope-param`)."""

    name: str
    # Parameter names that ask for it, as words: "user request" matches `user_request` and
    # `userRequest` (every word in the name), "apikey" also the one word `apikey`.
    params: list[str] = msgspec.field(default_factory=list)
    # What in a value shows it carries that data: conversation (copies the task or history,
    # transcript turns), tools (names the session's tools), credential (a secret the
    # detector knows), token (any token-shaped value: a key, a session id), prompt (an
    # assistant's system prompt), personal (phone, e-mail, the user's own words copied).
    carriers: list[str] = msgspec.field(default_factory=list)
    # Words or phrases of a task that ask for this data to go to a tool ("my phone", "log in").
    task_words: list[str] = msgspec.field(default_factory=list)
    # Words of a tool's name whose declared job needs it (`login`, `add_contact`).
    job_words: list[str] = msgspec.field(default_factory=list)
    # Parameter names that look like one of `params` but ask for something else
    # (`page_token`, `max_tokens`), in the same words form.
    except_params: list[str] = msgspec.field(default_factory=list)


class OutOfScopeParamSpec(RuleSpec):
    kinds: list[ParamKindSpec] = msgspec.field(default_factory=list)
    # Parameter-name words that make the data the user's or the agent's own (`requester_phone`,
    # `my_token`): the tool's job never explains those, only the task can.
    self_words: list[str] = msgspec.field(default_factory=list)
    copy_min_words: int = 8  # a run this long copied from the task or history is not a quote
    prompt_patterns: list[str] = msgspec.field(default_factory=list)  # a system prompt's text
    # In any argument, whatever its name: the agent's configuration written out under a label
    # ("system prompt: You are ...").
    disclosure_patterns: list[str] = msgspec.field(default_factory=list)
    disclosure_task_words: list[str] = msgspec.field(default_factory=list)  # the task asks
    phone_pattern: str = ""
    min_tool_names: int = 2  # session tool names a value must list to carry the tool list


class CanarySpec(RuleSpec):
    write_only: list[str] = msgspec.field(default_factory=list)


class CommandMismatchSpec(RuleSpec):
    wrappers: list[str] = msgspec.field(default_factory=list)  # e.g. env, nohup, timeout


class PrivilegeEscalationSpec(RuleSpec):
    programs: list[str] = msgspec.field(default_factory=list)
    paths: list[str] = msgspec.field(default_factory=list)
    command_patterns: list[str] = msgspec.field(default_factory=list)
    setuid_chmod: bool = True


class UnexpectedNetworkSpec(RuleSpec):
    allow_loopback: bool = False
    allowed_addresses: list[str] = msgspec.field(default_factory=list)
    allowed_ports: list[int] = msgspec.field(default_factory=list)  # e.g. 53 (resolver)
    # AF_UNIX sockets (fnmatch globs) a call may connect to outside the sandbox's own places
    allowed_unix: list[str] = msgspec.field(default_factory=list)


class IncompleteTreeSpec(RuleSpec):
    mode: Mode = "observe"


LOST_KINDS = (
    "exec", "open_write", "connect", "net_sent", "dns_send", "rename", "unlink", "symlink",
    "link", "chmod", "signal", "memfd", "blind", "killed", "window_overflow",
)  # fmt: skip


class LostEventsSpec(RuleSpec):
    # the kinds whose lost records (this sandbox's, in the call's window) deny: what could
    # hide an effect (rules_lost.py). `open` (reads) is not in it: what a read returns is
    # judged in the result; `window_overflow` is the window's own event limit.
    kinds: list[str] = msgspec.field(default_factory=lambda: list(LOST_KINDS))


class DestructiveCallSpec(RuleSpec):
    mode: Mode = "observe"  # the tool's own word (its name): recorded until proven precise


class ProfileDeviationSpec(RuleSpec):
    # A learned behaviour profile (`mtguard learn`); relative to the policy file naming it.
    # Without one the rule does nothing. Observe by default: review a profile before enforcing.
    mode: Mode = "observe"
    profile: str | None = None


class ProcessControlSpec(RuleSpec):
    # words by which a task or the arguments ask to signal a process (any inflection), and
    # the words that cancel one just before it ("do not restart") (rules_process.py)
    control_verbs: list[str] = msgspec.field(default_factory=list)
    negations: list[str] = msgspec.field(default_factory=list)
    # more words that make a tool's *name* say process control (browser_close, end_session):
    # too common in tasks to count there
    tool_verbs: list[str] = msgspec.field(default_factory=list)


class LlmJudgeSpec(RuleSpec):
    policies: list[str] = msgspec.field(default_factory=list)  # natural-language policies


class RulesSpec(_Strict):
    sensitive_file_arg: SensitiveFileArgSpec = msgspec.field(
        name="sensitive-file-arg", default_factory=SensitiveFileArgSpec
    )
    dangerous_shell: DangerousShellSpec = msgspec.field(
        name="dangerous-shell", default_factory=DangerousShellSpec
    )
    ssh_persistence: SshPersistenceSpec = msgspec.field(
        name="ssh-persistence", default_factory=SshPersistenceSpec
    )
    off_task_url: OffTaskUrlSpec = msgspec.field(
        name="off-task-url", default_factory=OffTaskUrlSpec
    )
    shadowed_tool: ShadowedToolSpec = msgspec.field(
        name="shadowed-tool", default_factory=ShadowedToolSpec
    )
    task_entity_mismatch: TaskEntitySpec = msgspec.field(
        name="task-entity-mismatch", default_factory=TaskEntitySpec
    )
    repeated_call: RepeatedCallSpec = msgspec.field(
        name="repeated-call", default_factory=RepeatedCallSpec
    )
    induced_call: InducedCallSpec = msgspec.field(
        name="induced-call", default_factory=InducedCallSpec
    )
    lookalike_tool: LookalikeToolSpec = msgspec.field(
        name="lookalike-tool", default_factory=LookalikeToolSpec
    )
    out_of_scope_param: OutOfScopeParamSpec = msgspec.field(
        name="out-of-scope-param", default_factory=OutOfScopeParamSpec
    )
    canary_touched: CanarySpec = msgspec.field(name="canary-touched", default_factory=CanarySpec)
    sensitive_file_read: RuleSpec = msgspec.field(
        name="sensitive-file-read", default_factory=RuleSpec
    )
    persistence_write: RuleSpec = msgspec.field(name="persistence-write", default_factory=RuleSpec)
    scope_escape: RuleSpec = msgspec.field(name="scope-escape", default_factory=RuleSpec)
    unexpected_shell: RuleSpec = msgspec.field(name="unexpected-shell", default_factory=RuleSpec)
    command_mismatch: CommandMismatchSpec = msgspec.field(
        name="command-mismatch", default_factory=CommandMismatchSpec
    )
    privilege_escalation: PrivilegeEscalationSpec = msgspec.field(
        name="privilege-escalation", default_factory=PrivilegeEscalationSpec
    )
    unexpected_network: UnexpectedNetworkSpec = msgspec.field(
        name="unexpected-network", default_factory=UnexpectedNetworkSpec
    )
    result_injection: ResultInjectionSpec = msgspec.field(
        name="result-injection", default_factory=ResultInjectionSpec
    )
    # secrets (rules_secrets.py, rules_flow.py): a credential in a result the task did not ask
    # for; a secret from one server's result sent on to another
    secret_in_result: RuleSpec = msgspec.field(name="secret-in-result", default_factory=RuleSpec)
    secret_flow: RuleSpec = msgspec.field(name="secret-flow", default_factory=RuleSpec)
    incomplete_tree: IncompleteTreeSpec = msgspec.field(
        name="incomplete-tree", default_factory=IncompleteTreeSpec
    )
    # fail closed: records of this sandbox lost in the kernel (a flood) in a call's window
    lost_events: LostEventsSpec = msgspec.field(name="lost-events", default_factory=LostEventsSpec)
    # stdio integrity (rules_integrity.py): the kernel-witnessed request and response
    request_mismatch: RuleSpec = msgspec.field(name="request-mismatch", default_factory=RuleSpec)
    undeclared_request: RuleSpec = msgspec.field(
        name="undeclared-request", default_factory=RuleSpec
    )
    result_tampered: RuleSpec = msgspec.field(name="result-tampered", default_factory=RuleSpec)
    unrequested_change: RuleSpec = msgspec.field(
        name="unrequested-change", default_factory=RuleSpec
    )
    destructive_call: DestructiveCallSpec = msgspec.field(
        name="destructive-call", default_factory=DestructiveCallSpec
    )
    profile_deviation: ProfileDeviationSpec = msgspec.field(
        name="profile-deviation", default_factory=ProfileDeviationSpec
    )
    # a signal to a process the call did not start, unasked for (rules_process.py)
    process_control: ProcessControlSpec = msgspec.field(
        name="process-control", default_factory=ProcessControlSpec
    )
    llm_judge: LlmJudgeSpec = msgspec.field(name="llm-judge", default_factory=LlmJudgeSpec)

    def mode_of(self, rule_id: str) -> Mode:
        spec: RuleSpec = getattr(self, rule_id.replace("-", "_"))
        return spec.mode


class PolicySpec(_Strict):
    extends: str | None = None  # a preset this file layers over ("balanced", ..., "none")
    description: str = ""
    guard: GuardSpec = msgspec.field(default_factory=GuardSpec)
    lists: ListsSpec = msgspec.field(default_factory=ListsSpec)
    rules: RulesSpec = msgspec.field(default_factory=RulesSpec)


RULE_IDS: tuple[str, ...] = tuple(f.encode_name for f in msgspec.structs.fields(RulesSpec))
