"""`process-control`: the call signalled a process it did not start, and nothing asked it to.

Security-relevant: a non-zero signal the kernel really delivered (`SignalEvent.delivered`)
to a process that did not begin during this call: a service or worker the server runs, a
sibling, anything outside the tree. Not relevant: probes (signal 0), refused sends, a process
signalling itself or its own threads (runtimes do that for GC, preemption, profiling),
anything the call itself started (a `subprocess` timeout ends its own child), a process
reaping its own forks, a descendant running the same program (browsers end their renderers,
worker pools their workers), and a server ending its own helper: a descendant an earlier
call spawned whose arguments did not name that program (a git library ends the
`git cat-file --batch` workers an earlier call left running).

Explained, so allowed: the task (the user's words) asks to stop, kill, restart, reload,
signal... (`control_verbs`, not negated), or orders, in words no list holds ("relance le
tunnel VPN"), something done to what a tool whose name or description says process control
acts on (`_job_asked`: a clause that orders, sharing a word with the tool's description),
or so do the call's arguments (a shell command
`kill 1234`, `systemctl restart x`), or the tool's name says process control (those verbs
and `tool_verbs`: browser_close, end_session) and either an argument names the target (its
pid, as the sandbox sees it or the host's, or its program) or the target is a worker an
earlier call of this session started (`ProcessNode.started_by`: the browser a navigation
launched, ended by the close tool). A process that was running before any call (a service
the server started with itself) stays the user's to stop.
"""

from __future__ import annotations

import os.path
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..model import ProcessNode, SignalEvent, Violation
from .context import CallContext
from .intent import ORDER_FILLERS, acting_clauses, words_of
from .policy import Policy
from .proc_memory import MEM_WHY, foreign_memory
from .provenance import STOP_WORDS
from .rules_pre import violation
from .text import iter_strings
from .treeview import SignalHit, TreeView, label

RULE = "process-control"
NEGATION_REACH = 3  # a negation cancels a control verb this many words after it
MAX_TASK_CHARS = 160
MIN_OBJECT_WORD = 3  # letters of a word shared by an ordering clause and the tool's description
# words any control tool's description says: they name no object of its own
GENERIC_OBJECTS = frozenset("process processes program programs task tasks job jobs".split())
_WORD = re.compile(r"[a-z]+|[0-9]+")
_NUMBER = re.compile(r"(?<![\w.-])(\d{1,8})(?![\w.])")
# what ends a clause: a negation does not reach past it
_CLAUSE_BREAK = re.compile(r"[;:.!?\n\u2014]+(?:\s|$)|\s-{1,2}\s")


@dataclass(frozen=True, slots=True)
class _Vocab:
    verbs: frozenset[str]
    negations: frozenset[str]


@lru_cache(maxsize=8)
def _vocab(verbs: tuple[str, ...], negations: tuple[str, ...]) -> _Vocab:
    return _Vocab(frozenset(v.lower() for v in verbs), frozenset(n.lower() for n in negations))


def vocabs(policy: Policy) -> tuple[_Vocab, _Vocab]:
    """(for the task and arguments, for tool names) from the rule's policy lists."""
    spec = policy.spec.rules.process_control
    words, neg = tuple(spec.control_verbs), tuple(spec.negations)
    return _vocab(words, neg), _vocab(words + tuple(spec.tool_verbs), neg)


def _forms(word: str) -> list[str]:
    """`word` and the base forms it may inflect (restarts, killed, stopping, terminated)."""
    out = [word]
    for suffix, repl in (("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("d", ""),
                         ("ing", ""), ("ing", "e")):  # fmt: skip
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            out.append(word[: len(word) - len(suffix)] + repl)
    out += [s[:-1] for s in out[1:] if len(s) > 3 and s[-1] == s[-2]]  # stopped -> stop
    return out


def control_verbs(text: str, vocab: _Vocab) -> list[str]:
    """The control verbs `text` uses, in any inflection, except just after a negation in
    the same clause ("do not restart", "without stopping"; not "the lights don't respond:
    restart the bridge", where the negation is another clause's)."""
    found = []
    for clause in _CLAUSE_BREAK.split(text.lower().replace("n't", " not")):
        seq = _WORD.findall(clause)
        for i, w in enumerate(seq):
            if not any(f in vocab.verbs for f in _forms(w)):
                continue
            if any(b in vocab.negations for b in seq[max(0, i - NEGATION_REACH) : i]):
                continue
            found.append(w)
    return found


def _tool_controls(tool: str, vocab: _Vocab) -> bool:
    """Does the tool's name say process control (kill_process, restart-worker, stopService)?"""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", tool)
    return bool(control_verbs(spaced, vocab))


def _job_asked(ctx: CallContext, vocab: _Vocab, tool_vocab: _Vocab) -> bool:
    """The called tool says process control (its name, or its own description: "stops the
    tunnel process") and a clause of the task that orders something names what the tool
    acts on (a word of the tool's name or description: "relance le tunnel VPN")."""
    desc = next((t.description for t in ctx.untrusted.tools
                 if t.server == ctx.call.server and t.name == ctx.call.tool), "")  # fmt: skip
    if not (_tool_controls(ctx.call.tool, tool_vocab) or control_verbs(desc, vocab)):
        return False
    said = (*words_of(desc), *words_of(ctx.call.tool.replace("_", " ")))
    objects = {w for w in said
               if len(w) >= MIN_OBJECT_WORD and w.isalpha() and w not in STOP_WORDS
               and w not in GENERIC_OBJECTS and not any(f in vocab.verbs for f in _forms(w))}
    negations = frozenset(vocab.negations)
    return any(  # the clause's words after its verb: what it orders something done to
        objects.intersection([w for w in words_of(c) if w not in ORDER_FILLERS][1:])
        for c in acting_clauses(ctx.task_text or "", negations)
    )


def _names_target(ctx: CallContext, sig: SignalEvent, target: ProcessNode | None) -> str | None:
    """The argument that names the signalled process: its pid or its program, else None."""
    pids = {str(p) for p in (sig.target_pid, sig.target_host_pid) if p is not None and p > 0}
    progs: set[str] = set()
    if target is not None:
        argv = target.argv or [target.exe]
        progs.update(os.path.basename(a).lower() for a in argv[:3] if a and not a.startswith("-"))
        progs.add(os.path.basename(target.exe).lower())
    if sig.target_comm:
        progs.add(sig.target_comm.lower())
    progs = {p for p in progs if len(p) >= 3}
    for key, text in ctx.arg_items:
        if pids & set(_NUMBER.findall(text)):
            return f"argument {key} names pid {text[:40]!r}"
        words = set(re.findall(r"[\w.-]+", text.lower()))
        hit = progs & words
        if hit:
            return f"argument {key} names {sorted(hit)[0]!r}"
    return None


def _targets(hit: SignalHit, view: TreeView) -> list[ProcessNode | None]:
    """Every process the signal reached that the record names (a process group: several);
    None for one outside the tree."""
    more = [view.by_key.get(k) for k in hit.event.more_targets]
    return [hit.target, *more]


def _programs(node: ProcessNode) -> set[str]:
    argv = node.argv or [node.exe]
    names = {os.path.basename(a).lower() for a in argv[:3] if a and not a.startswith("-")}
    names.add(os.path.basename(node.exe).lower())
    return {n for n in names if len(n) >= 2}


def _own_helper(target: ProcessNode | None, ctx: CallContext) -> bool:
    """A worker an earlier call spawned without asking for that program: the server's own
    helper (git's `cat-file --batch`, a pool's process), ended as the server sees fit. A
    process an earlier call launched on request (its arguments name the program) is the
    user's; a process from before any call (a service) has no `started_by`."""
    if target is None or not target.started_by:
        return False
    earlier = next((c for c in ctx.recent_calls if c.call_id == target.started_by), None)
    if earlier is None:
        return True  # spawned by a call older than the history kept: not one this task made
    progs = _programs(target)
    for _key, text in iter_strings(earlier.arguments):
        # words of a command line, each as a program name (`/usr/bin/git log` names git; a
        # path whose folder happens to be called git does not)
        words = {os.path.basename(w.strip("'\"`;&|()")).lower() for w in text.split()}
        if progs & words:
            return False
    return True


def _relevant(hit: SignalHit, view: TreeView, ctx: CallContext) -> bool:
    sig = hit.event
    if sig.signal == 0 or sig.delivered == 0 or sig.result < 0:
        return False  # a probe, a refused send, nothing signalled
    if sig.relation in ("self", "unknown") or sig.started_in_call:
        return False
    if sig.relation != "descendant":
        return True
    targets = _targets(hit, view)
    # a process reaping its own forks: descendants running the same program
    if hit.proc.exe and all(t is not None and t.exe == hit.proc.exe for t in targets):
        return False
    return not all(_own_helper(t, ctx) for t in targets)


def process_control(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    """Signals (below) and opens of another process's memory (`proc_memory`)."""
    found = _signal_control(ctx, view, policy)
    mem = foreign_memory(ctx, view)
    if not mem:
        return found
    if found:
        found[0].evidence.extend(mem)
        return found
    return [violation(RULE, policy, "post", MEM_WHY, mem)]


def _signal_control(ctx: CallContext, view: TreeView, policy: Policy) -> list[Violation]:
    hits = [h for h in view.signals if _relevant(h, view, ctx)]
    if not hits:
        return []
    vocab, tool_vocab = vocabs(policy)
    task = ctx.task_text or ""
    if control_verbs(task, vocab):
        return []  # the user asked to stop, restart, signal... something
    if _job_asked(ctx, vocab, tool_vocab):
        return []  # the user ordered something done to what this control tool acts on
    args_ask = next((t for t in ctx.arg_texts if control_verbs(t, vocab)), None)
    if args_ask is not None:
        return []  # the arguments ask for it (a `kill` or `systemctl restart` command)
    controls = _tool_controls(ctx.call.tool, tool_vocab)
    evidence: list[str] = []
    for h in hits:
        sig = h.event
        if controls and all(t is not None and t.started_by for t in _targets(h, view)):
            continue  # a process-control tool ending workers this session's calls started
        if controls and _names_target(ctx, sig, h.target) is not None:
            continue  # a process-control tool pointed at this very process
        started = "not started by this call"
        evidence.append(f"{label(h.proc)} sent {sig.summary} ({started})")
    if not evidence:
        return []
    quoted = task[:MAX_TASK_CHARS] + ("..." if len(task) > MAX_TASK_CHARS else "")
    why = (
        "the tool names process control, but no argument names the target and no call of "
        "this session started it; " if controls else ""
    )
    evidence.append(
        f"{why}task: {quoted!r} asks to stop, restart or signal nothing" if task
        else f"{why}no task was given: nothing asked to stop, restart or signal a process"
    )
    return [
        violation(
            RULE,
            policy,
            "post",
            "the call signalled a process it did not start, which neither the task nor the "
            "arguments ask to stop, restart or signal",
            evidence,
        )
    ]
