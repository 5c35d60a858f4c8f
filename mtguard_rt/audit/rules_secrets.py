"""`secret-in-result` (post): a secret the agent was not asked to handle, in a result.

The result carries a secret (`secrets.find_secrets`; for a tool whose name says it hands out
secrets, its mixed-character values too) that neither the call's arguments nor the task
supplied, and the task does not ask for it: it names no file the call read (nor a directory
holding one), and has no credential word or this very call (same tool, same arguments)
returned no secret earlier in the session (a rug pull). Without a task, the tool's job or a
read file the arguments name explains it. Evidence: the kind, where, a redacted prefix and
the length, and the files the call read. Its pre-execution twin, `secret-flow`, is in
`rules_flow`.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..model import Violation, call_digest
from .context import CallContext
from .policy import Policy
from .rules_files import reads, took_effect
from .secrets import (
    asks_for_credentials,
    result_secrets,
    secret_tool,
)
from .text import names_path
from .treeview import TreeView

MAX_EVIDENCE = 10
MAX_SHOWN = 6  # secrets listed in the evidence (then where they came from and why)
_ABS_PATH = re.compile(r"(?<![\w.~$])/[^\s'\"`,;:()<>]+")
MAX_SOURCES = 3  # files named as where a secret may have come from
# Reads that are the program itself or the system's plumbing, not data it could hand over.
_SYSTEM = ("/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/proc/", "/sys/", "/dev/")
_PLUMBING = frozenset(
    "/etc/passwd /etc/group /etc/nsswitch.conf /etc/hosts /etc/host.conf /etc/resolv.conf "
    "/etc/gai.conf /etc/localtime /etc/mime.types /etc/os-release /etc/ld.so.cache".split()
)
_CODE = (".so", ".pyc", ".node", ".wasm", ".pth", ".mo")  # compiled: not what a call hands over
_LIBRARY = ("/node_modules/", "/site-packages/", "/dist-packages/", "/__pycache__/", "/.cache/")
_CERTS = ("/etc/ssl/", "/etc/ca-certificates", "/etc/fonts/", "/etc/locale")


def data_reads(view: TreeView) -> list[str]:
    """Files the call opened for reading (successfully) that hold data, not program code or
    system plumbing, latest first: where a secret in its result can have come from. A path
    that is the directory of another read is left out."""
    found: dict[str, int] = {}
    for p in view.tree.processes:
        for ev in p.files:
            path = ev.path
            if not (reads(ev) and took_effect(ev)) or path in _PLUMBING:
                continue
            if path.startswith(_SYSTEM + _CERTS) or path.endswith(_CODE):
                continue
            if not any(d in path for d in _LIBRARY):
                found[path] = max(found.get(path, 0), ev.ts_ns)
    dirs = {p.rsplit("/", 1)[0] for p in found}
    return sorted((p for p in found if p not in dirs), key=lambda p: -found[p])


def _named_dirs(task: str) -> list[str]:
    """Absolute directories the task spells out (two levels deep at least: not / or /tmp)."""
    out = []
    for m in _ABS_PATH.finditer(task):
        path = os.path.normpath(m.group(0).rstrip(".,"))
        if path.count("/") >= 2:
            out.append(path)
    return out


def _under(path: str, dirs: list[str]) -> bool:
    return any(path.startswith(d + "/") for d in dirs)


def _unasked(ctx: CallContext, view: TreeView, read: list[str]) -> str | None:
    """Why the secrets of this call's result are not explained, or None when they are."""
    task = ctx.task_text
    digest = (ctx.call.server, call_digest(ctx.call.tool, ctx.call.arguments))
    if task is None:
        if any(names_path(ctx.arg_texts, path) for path in read):
            return None  # the arguments name the file it came from
        if secret_tool(ctx.call.tool):
            return None  # the tool's job, and no task to say otherwise
        return "no task asks for it and the tool's job is not to return one"
    dirs = _named_dirs(task)
    if any(names_path([task], path) or _under(path, dirs) for path in read):
        return None  # the user pointed at the file it is in, or at its directory
    if digest in ctx.untrusted.clean:
        return "the same call (tool and arguments) returned no secret earlier in this session"
    if asks_for_credentials(task):
        return None
    return "the task asks for no credential and names no file the call read"


def secret_in_result(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    found = result_secrets(ctx.call.tool, result)
    supplied = [*ctx.arg_texts, ctx.task_text or ""]
    found = [(k, f) for k, f in found if not any(f.value in t for t in supplied)]
    if not found:
        return []
    read = data_reads(view)
    why = _unasked(ctx, view, read)
    if why is None:
        return []
    ev = [f"result {key!r}: {f.describe()}" for key, f in found[:MAX_SHOWN]]
    if len(found) > MAX_SHOWN:
        ev.append(f"... and {len(found) - MAX_SHOWN} more")
    if read:
        more = f" (+{len(read) - MAX_SOURCES} more)" if len(read) > MAX_SOURCES else ""
        ev.append(f"the call read {', '.join(read[:MAX_SOURCES])}{more}")
    ev.append(why)
    rule = "secret-in-result"
    reason = "the result carries a secret the task did not ask for"
    return [
        Violation(
            rule=rule,
            phase="post",
            mode=policy.mode_of(rule),
            reason=reason,
            evidence=ev[:MAX_EVIDENCE],
        )
    ]
