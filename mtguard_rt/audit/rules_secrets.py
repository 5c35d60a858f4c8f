"""`secret-in-result` (post): a secret the agent was not asked to handle, in a result.

The result carries a secret (`secrets.find_secrets`; for a tool whose name says it hands out
secrets, its mixed-character values too) that neither the call's arguments nor the task
supplied, and the task does not ask for it: it names no file the call read (nor a directory
holding one), and has no credential word or this very call (same tool, same arguments)
returned no secret earlier in the session (a rug pull). The task also asks for it when it
names the entry every secret came from (an argument value that is the read file's name:
'github-ci' for keyring/github-ci.txt) or, for a tool that hands out secrets, its store (the
read file's directory: `rules_flow.store_named`). Without a task, the tool's job or a
read file the arguments name explains it. Evidence: the kind, where, a redacted prefix and
the length, and the files the call read. Its pre-execution twin, `secret-flow`, is in
`rules_flow`.

Known values are matched in any form (`decode.find_known`: reversed, ROT13, url, q-p,
zero-width, line-broken base64, a part of 12+ chars): the secrets in the files the call read
(`ctx.read_back`, read from the sandbox once the call settled: `secret_sources`) and, from
this server's `SecretMemory`, those its last calls read; a self-identifying format whose
halves left in two results of the server is found on the second (evidence names both).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..model import BehaviorTree, Violation, call_digest
from .context import CallContext
from .decode import find_known
from .decode_memory import SecretMemory
from .intent import orders
from .policy import Policy
from .rules_files import reads, took_effect
from .rules_flow import store_named
from .secrets import (
    MIN_VALUE,
    Finding,
    asks_for_credentials,
    find_secrets,
    looks_real,
    name_words,
    result_secrets,
    secret_tool,
)
from .text import iter_strings, leaf_key, names_path
from .treeview import TreeView
from .wants import names_tool, task_wants

MAX_EVIDENCE = 10
MAX_SHOWN = 6  # secrets listed in the evidence (then where they came from and why)
_ABS_PATH = re.compile(r"(?<![\w.~$])/[^\s'\"`,;:()<>]+")
MAX_SOURCES = 3  # files named as where a secret may have come from
MIN_ENTRY_NAME = 3  # characters of an argument value that names the entry a call read
# Reads that are the program itself or the system's plumbing, not data it could hand over.
_SYSTEM = ("/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/proc/", "/sys/", "/dev/")
_PLUMBING = frozenset(
    "/etc/passwd /etc/group /etc/nsswitch.conf /etc/hosts /etc/host.conf /etc/resolv.conf "
    "/etc/gai.conf /etc/localtime /etc/mime.types /etc/os-release /etc/ld.so.cache".split()
)
_CODE = (".so", ".pyc", ".node", ".wasm", ".pth", ".mo")  # compiled: not what a call hands over
_LIBRARY = ("/node_modules/", "/site-packages/", "/dist-packages/", "/__pycache__/", "/.cache/")
_CERTS = ("/etc/ssl/", "/etc/ca-certificates", "/etc/fonts/", "/etc/locale")


MAX_READ_BACK = 8  # files a call read whose content is read back from the sandbox
MAX_FILE_VALUES = 8  # secret values taken from one file read back
MAX_KNOWN = 16  # known values looked for in one result
# words of a file's name that say it holds one credential (its whole content is the value)
_CREDENTIAL_FILE = frozenset(
    "key keys token tokens secret secrets password passwd pass pwd credential credentials "
    "creds netrc apikey pat auth".split()
)
# the last word of a tool's name that says it returns one credential (`sdk_key`, `get_token`)
_CREDENTIAL_NOUNS = frozenset(
    "key keys token tokens secret secrets password passwords passwd credential credentials "
    "creds apikey".split()
)
MAX_SOURCE_CHARS = 64 * 1024  # a file read back longer than this gives no values
MAX_TOKEN_FILE = 512  # a one-credential file is one line of at most this many chars


def data_reads(view: TreeView) -> list[str]:
    """Files the call opened for reading (successfully) that hold data, not program code or
    system plumbing, latest first: where a secret in its result can have come from. A path
    that is the directory of another read is left out."""
    return _data_reads(view.tree)


def secret_sources(tree: BehaviorTree) -> list[str]:
    """The files whose content the supervisor reads back after the call (`ctx.read_back`):
    the latest `MAX_READ_BACK` data reads."""
    return _data_reads(tree)[:MAX_READ_BACK]


def file_secrets(path: str, content: str | None) -> list[str]:
    """The secret values in a file the call read (up to `MAX_SOURCE_CHARS`): what
    `find_secrets` finds in it (formats, assignments, netrc lines), or, for a file whose
    name says it holds a credential (api.key, registry.token), its whole content when that
    is one real-looking line."""
    if not content or len(content) > MAX_SOURCE_CHARS:
        return []  # a credential file is small; a big one's secrets are found in the result
    values = [f.value for f in find_secrets(content)]
    line = content.strip()
    named = _CREDENTIAL_FILE.intersection(name_words(path.rsplit("/", 1)[-1]))
    if named and len(line) <= MAX_TOKEN_FILE and "\n" not in line and looks_real(line):
        values.append(line)
    return list(dict.fromkeys(v for v in values if len(v) >= MIN_VALUE))[:MAX_FILE_VALUES]


def _data_reads(tree: BehaviorTree) -> list[str]:
    found: dict[str, int] = {}
    for p in tree.processes:
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


def _unasked(
    ctx: CallContext,
    view: TreeView,
    read: list[str],
    values: list[str] | None = None,
    policy: Policy | None = None,
) -> str | None:
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
    if asks_for_credentials(task) or _asks_tool_credential(ctx):
        return None
    own = _in_workspace(view, read)
    if values and policy is not None and _asks_entry(ctx, own, values, policy):
        return None
    return "the task asks for no credential and names no file the call read"


def _in_workspace(view: TreeView, read: list[str]) -> list[str]:
    """The read files inside the server's workspace (its seeded working directory): an entry
    the task asks for by name is one of the server's own, not a file it climbed out to."""
    ws = next((p.cwd for p in view.tree.processes if p.learned == "seeded" and p.cwd), None)
    if not ws or ws == "/":
        return []
    root = ws.rstrip("/") + "/"
    return [p for p in read if os.path.normpath(p).startswith(root)]


def _asks_entry(ctx: CallContext, read: list[str], secrets: list[str], policy: Policy) -> bool:
    """Every secret of the result is in the content of workspace files the task asks for: named
    as an entry (an argument value, which a sentence of the task that is not a question says
    as a word, that is the file's name without its extension) of a tool that hands out
    secrets or whose object the task asks for (`task_wants`: "my 'home' VPN profile" for
    `show_profile`; not "how many contacts are in the crm database?" for the DSN of
    `connection_string`), or lying in a store the task names for a tool that hands out
    secrets (`store_named`: the file's directory)."""
    task = ctx.task_text or ""
    low = " \n ".join(orders(task))
    if not (secret_tool(ctx.call.tool) or task_wants(ctx, policy)):
        low = ""
    args = {v.strip().lower() for v in ctx.arg_texts if len(v.strip()) >= MIN_ENTRY_NAME}
    asked: list[str] = []
    for path in read:
        content = ctx.read_back.get(path)
        if not content:
            continue
        base = os.path.basename(path).lower()
        named = any(
            re.search(rf"(?<![\w.-]){re.escape(v)}(?![\w-])", low)
            for v in args & {base, os.path.splitext(base)[0]}
        )
        folder = os.path.basename(os.path.dirname(path))
        if named or (folder and not folder.startswith(".")
                     and store_named(task, folder, ctx.call.tool)):  # fmt: skip
            asked.append(content)
    return bool(asked) and all(any(v in c for c in asked) for v in secrets)


def _asks_tool_credential(ctx: CallContext) -> bool:
    """The task names the called tool, and the tool's name says what it returns is a
    credential ("the SDK key" for `sdk_key`, "my license token" for `license_token`): the
    user asked for this very value, whatever the credential is called."""
    words = name_words(ctx.call.tool)
    if not words or words[-1] not in _CREDENTIAL_NOUNS:
        return False
    return names_tool(ctx, ctx.call.tool)


def _text(result: dict[str, Any]) -> str:
    return "\n".join(t for k, t in iter_strings(result) if leaf_key(k) not in ("type", "mimeType"))


def _known(
    ctx: CallContext, text: str, found: list[tuple[str, Finding]]
) -> tuple[list[tuple[str, Finding]], list[tuple[str, str]], list[str]]:
    """(findings, this call's material, the earlier calls' files they came from): known
    secret values the result carries in any form or in part (the files this call read, then
    what the server's last calls read), and the formats whose halves left in an earlier
    result of this server and this one."""
    material = [
        (path, v) for path, content in ctx.read_back.items() for v in file_secrets(path, content)
    ]
    memory = getattr(ctx.baseline, "secrets", None)
    earlier = list(memory.material) if isinstance(memory, SecretMemory) else []
    candidates = [(f"read {p}", "", v) for p, v in material] + [
        (f"read {m.source} in call {m.call}", m.source, m.value) for m in reversed(earlier)
    ]
    seen = {f.value for _, f in found}
    out: list[tuple[str, Finding]] = []
    sources: list[str] = []
    for where, source, value in candidates[:MAX_KNOWN]:
        if value in seen or any(value in v for v in seen):
            continue
        if (hit := find_known(text, value)) is not None:
            seen.add(value)
            form, what = hit
            kind = "part of a secret" if what != value else "secret"
            out.append(("(all text)", Finding(f"{kind} the server {where}", what, form)))
            sources += [source] if source else []
    if isinstance(memory, SecretMemory):
        for piece, kind in memory.across(text):
            if piece.value not in seen:
                seen.add(piece.value)
                how = f"split across two results: its first part in call {piece.call}"
                out.append(("(all text)", Finding(kind, piece.value, how)))
    return out, material, sources


def secret_in_result(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    found = result_secrets(ctx.call.tool, result)
    text = _text(result)
    known, material, sources = _known(ctx, text, found)
    memory = getattr(ctx.baseline, "secrets", None)
    if isinstance(memory, SecretMemory):  # for the next calls of this server
        memory.remember(f"{ctx.call.tool} ({ctx.call.call_id})", material, text)
    supplied = [*ctx.arg_texts, ctx.task_text or ""]
    found = [(k, f) for k, f in [*found, *known] if not any(f.value in t for t in supplied)]
    if not found:
        return []
    read = data_reads(view)
    values = [f.value for _, f in found]
    # a file an earlier call read: as if read now
    why = _unasked(ctx, view, [*read, *sources], values, policy)
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
