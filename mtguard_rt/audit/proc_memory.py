"""Another process's memory: an open of `/proc/<pid>/mem` is control of that process.

Writing it patches the code or data of a running process (inject a payload into the
server's other workers, pid 1, a helper); reading it dumps what that process holds (tokens,
keys). ptrace, process_vm_readv/writev and pidfd_getfd are refused by the seccomp profile,
so this file is the way left. `foreign_memory(ctx, view)` is the evidence, one line per
successful open of `/proc/<pid>/mem` (or `/proc/<pid>/task/<tid>/mem`) by number: a process
opening its own through `/proc/self` or `/proc/thread-self` is not one. Explained when an
argument names that very path (the user pointed the tool at it). `process-control` denies
on this evidence (rules_process.py), whatever the task's words: "stop" or "restart" do not
ask for another process's memory.
Limit: the number is in the sandbox's pid namespace and the tree's pids are the host's, so
a process naming its *own* pid by number is counted too (runtimes use /proc/self).
"""

from __future__ import annotations

import re

from .context import CallContext
from .text import names_path
from .treeview import TreeView, label

MEM_WHY = "the call opened another process's memory (/proc/<pid>/mem), which nothing asked for"
_MEM = re.compile(r"^/proc/(\d+|self|thread-self)(?:/task/\d+)?/mem$")


def foreign_memory(ctx: CallContext, view: TreeView) -> list[str]:
    """Evidence for each successful open of another process's /proc/<pid>/mem."""
    out: list[str] = []
    for p in view.tree.processes:
        for ev in p.files:
            if ev.op != "open" or ev.result < 0:
                continue
            m = _MEM.match(ev.path)
            if m is None or not m.group(1).isdigit():
                continue
            if names_path(ctx.arg_texts, ev.path):
                continue
            how = "to write" if "write" in ev.flags else "to read"
            out.append(f"{label(p)} opened {ev.path} {how}: the memory of process {m.group(1)}")
    return out
