"""Sandbox evidence of a call's side effects, read from its behavior tree (labels, not verdicts).

`side_effects(tree)` lists, harm first (`effect_rank`), what a call did beyond answering:
commands that ran (successful execs of processes the server spawned), files written, created,
removed, renamed or linked outside scratch places, credential-like files opened, connections,
DNS queries and signals delivered to other processes.
The evaluation uses it to tell "denied after the harm" from "denied before it"; the guard's
rules never read it.
"""

from __future__ import annotations

from ..model import BehaviorTree, FileEvent, RollbackReport, SignalEvent, call_digest

# Writes here are the runtime's own scratch, not a task's effect.
SCRATCH_PREFIXES = ("/proc/", "/dev/", "/sys/", "/tmp/.X", "/run/user/")
# Opening one of these is credential access, whatever the mode.
CREDENTIAL_MARKS = (
    "/.ssh/",
    "/.aws/",
    "/.gnupg/",
    "/.netrc",
    "/.git-credentials",
    "/etc/shadow",
    "/etc/sudoers",
    "/.config/gcloud/",
    "/.kube/config",
)
MUTATING_OPS = {"unlink", "rename", "mkdir", "rmdir", "chmod", "symlink", "link"}
WRITE_FLAGS = {"write", "create", "truncate"}
MAX_ITEMS = 12


def _file_effect(event: FileEvent) -> str | None:
    if event.result < 0 or event.path.startswith(SCRATCH_PREFIXES):
        return None
    if event.op in MUTATING_OPS:
        target = f" -> {event.target}" if event.target else ""
        return f"{event.op} {event.path}{target}"
    if event.op == "open" and WRITE_FLAGS & set(event.flags):
        return f"write {event.path}"
    if event.op == "open" and any(mark in event.path for mark in CREDENTIAL_MARKS):
        return f"read {event.path}"
    return None


def _signal_effect(sig: SignalEvent) -> bool:
    """A signal delivered to another process (not a probe, not its own threads)."""
    return sig.signal != 0 and sig.delivered > 0 and sig.relation != "self"


def effect_rank(effect: str) -> tuple[int, str]:
    """Harm first: credential reads, writes outside /tmp, commands, connections, the rest."""
    verb, _, rest = effect.partition(" ")
    if verb == "read":
        return 0, effect
    if verb == "write" and not rest.startswith("/tmp/"):
        return 1, effect
    if verb in ("connect", "signal"):
        return 2, effect
    if verb in ("exec", "dns"):
        return 3, effect
    return 4, effect


def undone_by_rollback(tree: BehaviorTree, rollback: RollbackReport | None) -> bool:
    """True when the workspace rollback restored what the call changed and the tree shows no
    effect it cannot undo: every file effect is inside the restored workspace, no credential
    was read, nothing connected or resolved a name, and no process the call started outlived
    it (its commands ran and ended)."""
    if rollback is None or rollback.action != "restored" or not tree.complete:
        return False
    inside = rollback.workspace.rstrip("/") + "/"
    roots = {p.key for p in tree.roots()}
    for proc in tree.processes:
        if proc.still_running and proc.key not in roots:
            return False
        if any(n.egress for n in proc.net) or any(d.direction == "query" for d in proc.dns):
            return False
        if any(_signal_effect(s) for s in proc.signals):
            return False  # another process was signalled: no rollback undoes that
        for event in proc.files:
            effect = _file_effect(event)
            if effect is None:
                continue
            named = event.target if event.target and event.op not in ("symlink", "link") else None
            paths = [event.path, *([named] if named else [])]  # a link's target is not changed
            if effect.startswith("read ") or not all(p.startswith(inside) for p in paths):
                return False
    return not any(d.direction == "query" for d in tree.dns)


def side_effects(tree: BehaviorTree, since_ns: int = 0) -> list[str]:
    """`since_ns`: only effects from that (kernel, monotonic) time on."""
    out: list[str] = []
    roots = {p.key for p in tree.roots()}
    for proc in tree.processes:
        if proc.key not in roots:
            for ex in proc.execs:
                if ex.result == 0 and ex.ts_ns >= since_ns:
                    out.append("exec " + (" ".join(ex.argv) or ex.path)[:120])
        for event in proc.files:
            effect = _file_effect(event) if event.ts_ns >= since_ns else None
            if effect is not None:
                out.append(effect)
        for net in proc.net:
            if net.egress and net.ts_ns >= since_ns:  # not a connect that sent nothing
                out.append(f"connect {net.address}:{net.port}")
        for dns in proc.dns:
            if dns.direction == "query" and dns.ts_ns >= since_ns:
                out.append(f"dns {dns.name}")
        for sig in proc.signals:
            if sig.ts_ns >= since_ns and _signal_effect(sig):
                whom = " ".join(sig.target_argv) or sig.target_comm or f"pid {sig.target_pid}"
                out.append(f"signal {sig.name} -> {whom[:100]}")
    out.extend(f"dns {d.name}" for d in tree.dns if d.direction == "query" and d.ts_ns >= since_ns)
    unique = sorted(dict.fromkeys(out), key=effect_rank)  # stable: observation order per rank
    if len(unique) > MAX_ITEMS:
        unique = [*unique[:MAX_ITEMS], f"... {len(unique) - MAX_ITEMS} more"]
    return unique


def cut_before_effect(tree: BehaviorTree, terminated: bool) -> bool:
    """True when the call was terminated online (`terminated`) and, from the first tools/call
    its server read that was not the declared call (swapped, routed, replayed, injected) on,
    the tree shows no side effect and the server answered none of those requests: what the
    host slipped in was read but never acted on."""
    cap = tree.stdio
    if not terminated or cap is None or cap.lossy:
        return False
    want = call_digest(tree.call.tool, tree.call.arguments)
    own_seen, foreign = False, []
    for m in cap.requests:
        if m.method != "tools/call":
            continue
        own = m.id == cap.request_id and m.digest == want and cap.server == tree.call.server
        if own and not own_seen:
            own_seen = True
        else:
            foreign.append(m)
    if not foreign:
        return False
    ids = {m.id for m in foreign}
    if any(r.id in ids for r in cap.responses):
        return False
    return not side_effects(tree, since_ns=min(m.ts_ns for m in foreign))
