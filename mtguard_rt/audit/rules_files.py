"""Post-execution file rules: canaries, sensitive reads, persistence writes.

Pure functions of `(ctx, view, result, policy)`. Canaries are exact paths (a write-only
canary such as ~/.bashrc fires on modification only) plus marker strings searched in the
result, also base64-encoded. Sensitive and persistence matches use the policy's targeted
globs and ignore paths the declared arguments name (those were the pre-audit's to judge).
A failed syscall (an open answering ENOENT or EACCES, a refused rename) had no effect: it
stays in the tree as evidence but is never a read or a write here (`took_effect`). A
process's own state under /proc/<pid>/ (environ, mem) read by a /proc walker such as `ps` is
the server's own: the sandbox has its own pid namespace (`own_process_state`).
"""

from __future__ import annotations

import re
from typing import Any

from ..model import FileEvent, Violation
from .consent import WriteConsent, persistence_hits
from .context import CallContext
from .madefiles import SandboxFiles, events_in_order
from .policy import CANARY, SENSITIVE, Policy
from .rules_pre import violation
from .scan import marker_hits
from .text import iter_strings, names_path
from .treeview import FileHit, TreeView, describe, is_write, label

# /proc/<pid>/<file> (or a thread's): the state of one process, not a path through it (root/,
# cwd/ and fd/ lead into a file system and are classified as the file they reach)
_PROC_STATE = re.compile(r"^/proc/(?:\d+|self|thread-self)(?:/task/\d+)?/[^/]+$")


def own_process_state(path: str) -> bool:
    """Is `path` one process's own state file (/proc/7/environ, /proc/self/mem)?

    Every traced tree comes from a sandbox with its own pid namespace, so any /proc/<pid>
    a traced process can open is one of the server's own processes (or its children): ps,
    top and process libraries read their environ on every listing. Their environment is the
    server's own configuration, which it holds anyway; another process's secrets are not
    reachable this way. (The pre-audit still judges an argument that names such a path: a
    call asking the server to hand over its environment.)"""
    return _PROC_STATE.match(path) is not None


def took_effect(ev: FileEvent) -> bool:
    """Did the syscall succeed? A failed open read nothing and a failed write wrote nothing
    (npm probing a missing ~/.npmrc, a shell looking for rc files that are not there)."""
    return ev.result >= 0


def result_text(result: dict[str, Any]) -> str:
    return "\n".join(text for _, text in iter_strings(result))


def canary_touched(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    """A canary read (a write-only one: written), or its marker in the result. A write-only
    canary the user asked this call to edit (`WriteConsent`) is a recorded consent: an
    observe-mode record, not a deny; its marker may then come back in the edit's result."""
    ev_lines: list[str] = []
    consent = WriteConsent(ctx, policy)
    consented: dict[str, str] = {}
    for hit in view.matching(CANARY):
        assert hit.canary is not None
        if not took_effect(hit.event):
            continue  # nothing read or written (a kernel kill on touch is reported apart)
        if policy.canary_write_only.matches(hit.canary):
            if not is_write(hit.event):
                continue
            if (why := consent.why(hit.canary)) is not None:
                consented[hit.canary] = why
                continue
        ev_lines.append(f"{label(hit.proc)} {hit.event.op} {hit.path} {describe(hit.event)}")
    if ctx.canaries:
        text = result_text(result)
        for canary, marker in ctx.canaries.items():
            if canary in consented:
                continue
            ev_lines += [f"the result contains {h}" for h in marker_hits(text, {canary: marker})]
    if ev_lines:
        reason = "a canary credential was touched"
        return [violation("canary-touched", policy, "post", reason, ev_lines)]
    if consented:
        return [consent_record("canary-touched", list(consented.values()))]
    return []


def consent_record(rule: str, lines: list[str]) -> Violation:
    """What a consented write leaves in the verdict: the rule's record, in observe mode."""
    reason = "a write the user asked for, to a protected persistence file: allowed"
    return Violation(rule=rule, phase="post", mode="observe", reason=reason, evidence=lines)


def reads(ev: FileEvent) -> bool:
    """Could the open read the file? Not a write-only open (O_WRONLY: gpg writing its new
    keyring); an open whose flags were not recorded counts as a read."""
    return ev.op == "open" and (not ev.flags or "read" in ev.flags)


def made_here(ctx: CallContext, view: TreeView, hits: list[FileHit]) -> set[int]:
    """ids of the hit events whose path held, at that moment, content the sandbox made
    (`SandboxFiles`: earlier calls of this server's session, then this call in time order)."""
    ledger = getattr(ctx.baseline, "files", None)
    made = ledger.copy() if isinstance(ledger, SandboxFiles) else SandboxFiles()
    wanted = {id(h.event): h.path for h in hits}
    found: set[int] = set()
    for ev in events_in_order(view.tree):
        if id(ev) in wanted and made.made(wanted[id(ev)]):
            found.add(id(ev))
        made.step(ev)
    return found


def secret_reads(ctx: CallContext, view: TreeView) -> list[FileHit]:
    """Every successful read of a sensitive file or a canary, named by the arguments or not,
    except the server's own /proc state and files the sandbox made (`made_here`)."""
    hits = [
        h
        for h in view.matching(SENSITIVE | CANARY)
        if reads(h.event) and took_effect(h.event) and not own_process_state(h.path)
    ]
    made = made_here(ctx, view, hits) if hits else set()
    return [h for h in hits if id(h.event) not in made]


def _as_opened(h: FileHit) -> str:
    """The path as the process named it, and what it is when that differs (a path through
    /proc/<pid>/root is judged as the file it reaches)."""
    named = h.event.path.rstrip("/") or "/"
    return h.path if named == h.path else f"{named} (that is {h.path})"


def sensitive_file_read(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    """A sensitive file opened for reading that the arguments do not name. Not a secret: a
    failed open, a write-only open, the server's own /proc state, and a file whose content
    the sandbox made itself in this session (`SandboxFiles`: gpg creating its keyring in
    the empty sandbox home and reading it back). Canaries are `canary_touched`'s, always."""
    hits = [
        h
        for h in view.matching(SENSITIVE)
        if reads(h.event)
        and took_effect(h.event)
        and h.canary is None
        and not own_process_state(h.path)
        and not names_path(ctx.arg_texts, h.path)
    ]
    made = made_here(ctx, view, hits) if hits else set()
    ev_lines = [
        f"{label(h.proc)} opened {_as_opened(h)} {describe(h.event)}"
        for h in hits
        if id(h.event) not in made
    ]
    if not ev_lines:
        return []
    return [
        violation(
            "sensitive-file-read",
            policy,
            "post",
            "a sensitive file the arguments do not name was opened",
            ev_lines,
        )
    ]


PERSISTENCE_WHY = "a persistence location was modified that the task and arguments do not ask for"


def no_content(h: FileHit) -> bool:
    """Does the event put no content at `h.path`? A directory made or removed, a name
    removed, a mode changed, a file renamed away (its destination is where content lands)."""
    ev = h.event
    return ev.op in ("mkdir", "rmdir", "unlink", "chmod") or (
        ev.op == "rename" and h.path != (ev.target or "").rstrip("/")
    )


def persistence_write(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    """A write to a persistence location without the user's consent (`WriteConsent`: the
    task asks for the place and for every line the call added there; without a task, the
    arguments naming it suffice). A consented write is recorded in observe mode, as is a
    directory made (or a name removed) where the task asks for such a file."""
    consent = WriteConsent(ctx, policy)
    ev_lines: list[str] = []
    consented: dict[str, str] = {}
    for h in persistence_hits(view, consent):
        if not (is_write(h.event) and took_effect(h.event)) or h.event.op == "mkdir":
            continue  # (a directory made runs nothing: what lands in it is judged)
        if (why := consent.why(h.path)) is not None:
            consented[h.path] = why
        elif no_content(h) and (place := consent.place(h.path)) and consent.may_write(h.path):
            consented.setdefault(h.path, f"{h.path}: {h.event.op} only ({place})")
        elif not consent.explains(h.path):
            line = f"{label(h.proc)} {h.event.op} {h.path} {describe(h.event)}"
            if refusal := consent.refusal(h.path):  # say why it was no consent
                line += f"; {refusal}"
            ev_lines.append(line)
    if ev_lines:
        return [violation("persistence-write", policy, "post", PERSISTENCE_WHY, ev_lines)]
    if consented:
        return [consent_record("persistence-write", list(consented.values()))]
    return []
