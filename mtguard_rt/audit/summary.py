"""A compact, JSON-ready summary of a behavior tree for the LLM judge.

The default `simplify` when the engine is given none: one entry per process (pid, parent
pid, program, argv, seeded or observed) with its de-duplicated file accesses, connections,
DNS names and signals sent to other processes. Library loads and interpreter start-up reads
are left out and counted, so the judge sees what the call did, not how Python starts. Rules
never see this: they read the raw tree.
"""

from __future__ import annotations

import re
from typing import Any

from ..model import BehaviorTree, ProcessNode
from .treeview import describe

MAX_FILES_PER_PROCESS = 40
_LOADER_NOISE = re.compile(
    r"^(/usr/lib/|/lib/|/lib64/|/usr/lib64/|/usr/local/lib/|/usr/share/(locale|zoneinfo)/"
    r"|/etc/ld\.so\.|/proc/self/|/sys/|/dev/(null|urandom|random|tty|pts/)"
    r"|/etc/localtime$|/usr/bin/pyvenv\.cfg$)|/__pycache__/|\.so(\.[0-9.]+)?$|/site-packages/"
)


def _process(p: ProcessNode, ppid_of: dict[str, int]) -> dict[str, Any]:
    files: dict[str, str] = {}
    omitted = 0
    for ev in p.files:
        if _LOADER_NOISE.search(ev.path):
            omitted += 1
            continue
        line = f"{ev.path}{' -> ' + ev.target if ev.target else ''} {describe(ev)}"
        files.setdefault(line, line)
    out: dict[str, Any] = {
        "pid": p.pid,
        "parent_pid": ppid_of.get(p.parent or "", p.ppid),
        "program": p.exe,
        "argv": p.argv,
        "learned": p.learned,
    }
    if p.still_running:
        out["still_running"] = True
    if p.exit_code is not None:
        out["exit_code"] = p.exit_code
    if p.killed_by:
        out["killed_by"] = p.killed_by
    listed = list(files)
    if listed:
        out["files"] = listed[:MAX_FILES_PER_PROCESS]
    if omitted or len(listed) > MAX_FILES_PER_PROCESS:
        out["files_omitted"] = omitted + max(0, len(listed) - MAX_FILES_PER_PROCESS)
    if p.net:
        out["connections"] = sorted(
            {f"{n.summary}{' failed' if n.result < 0 else ''}" for n in p.net}
        )
    if p.dns:
        out["dns"] = sorted({d.name for d in p.dns if d.direction == "query"})
    sent = {g.summary for g in p.signals if g.relation != "self"}  # not its own threads
    if sent:
        out["signals_sent"] = sorted(sent)
    return out


def summarize(tree: BehaviorTree) -> dict[str, Any]:
    """The default simplification of `tree` for the judge (see the module docstring)."""
    pid_of = {p.key: p.pid for p in tree.processes}
    out: dict[str, Any] = {
        "complete": tree.complete,
        "processes": [_process(p, pid_of) for p in tree.processes],
    }
    if tree.incomplete_reasons:
        out["incomplete_reasons"] = tree.incomplete_reasons
    if tree.dns:
        out["unattributed_dns"] = sorted({d.name for d in tree.dns if d.direction == "query"})
    return out
