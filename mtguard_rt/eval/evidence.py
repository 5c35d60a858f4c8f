"""Sandbox evidence of a call's side effects, read from its behavior tree (labels, not verdicts).

`side_effects(tree)` lists, harm first (`effect_rank`), what a call did beyond answering:
commands that ran (successful execs of processes the server spawned), files written, created,
removed or renamed outside scratch places, credential-like files opened, connections and DNS
queries.
The evaluation uses it to tell "denied after the harm" from "denied before it"; the guard's
rules never read it.
"""

from __future__ import annotations

from ..model import BehaviorTree, FileEvent, RollbackReport

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
MUTATING_OPS = {"unlink", "rename", "mkdir", "rmdir", "chmod"}
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


def effect_rank(effect: str) -> tuple[int, str]:
    """Harm first: credential reads, writes outside /tmp, commands, connections, the rest."""
    verb, _, rest = effect.partition(" ")
    if verb == "read":
        return 0, effect
    if verb == "write" and not rest.startswith("/tmp/"):
        return 1, effect
    if verb == "connect":
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
        for event in proc.files:
            effect = _file_effect(event)
            if effect is None:
                continue
            paths = [event.path, *([event.target] if event.target else [])]
            if effect.startswith("read ") or not all(p.startswith(inside) for p in paths):
                return False
    return not any(d.direction == "query" for d in tree.dns)


def side_effects(tree: BehaviorTree) -> list[str]:
    out: list[str] = []
    roots = {p.key for p in tree.roots()}
    for proc in tree.processes:
        if proc.key not in roots:
            for ex in proc.execs:
                if ex.result == 0:
                    out.append("exec " + (" ".join(ex.argv) or ex.path)[:120])
        for event in proc.files:
            effect = _file_effect(event)
            if effect is not None:
                out.append(effect)
        for net in proc.net:
            if net.egress:  # not a datagram socket's connect that sent nothing
                out.append(f"connect {net.address}:{net.port}")
        for dns in proc.dns:
            if dns.direction == "query":
                out.append(f"dns {dns.name}")
    out.extend(f"dns {d.name}" for d in tree.dns if d.direction == "query")
    unique = sorted(dict.fromkeys(out), key=effect_rank)  # stable: observation order per rank
    if len(unique) > MAX_ITEMS:
        unique = [*unique[:MAX_ITEMS], f"... {len(unique) - MAX_ITEMS} more"]
    return unique
