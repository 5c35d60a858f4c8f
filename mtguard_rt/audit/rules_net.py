"""Post-execution network and completeness rules.

A destination is derived when its DNS name (or the name that resolved to its address) is
allowlisted or named by the arguments or the task, or when the address itself is written
there. Resolver traffic on allowed ports passes; the names it resolves are still checked.
Only egress counts (`NetEvent.egress`): a datagram socket's connect() sends nothing, so a
UDP connect with no datagram after it (a reachability probe) is observed, not a violation.
Under a kernel-enforced allowlist (`--allow-domain`) its names are derived and a connection
the kernel let through is allowed; one it refused is evidence ("refused by network policy").
Incomplete trees and children that outlive the call are reported under their own rule.
"""

from __future__ import annotations

from typing import Any

from ..model import DATAGRAM_TRANSPORTS, BehaviorTree, DnsEvent, NetEvent, Violation
from .context import CallContext
from .patterns import canonical_ip, domain_within, is_loopback, normalize_domain
from .policy import Policy
from .rules_pre import MAX_EVIDENCE, violation
from .text import bare_hosts, url_hosts
from .treeview import TreeView, label


def _all_dns(tree: BehaviorTree) -> list[tuple[str, DnsEvent]]:
    out = [(f"{label(p)}", d) for p in tree.processes for d in p.dns]
    out.extend(("unattributed" if d.pid is None else f"pid {d.pid}", d) for d in tree.dns)
    return out


def egress_text(n: NetEvent, ip: str) -> str:
    """Evidence for one egress event: `connected to 192.0.2.1:443` (tcp, or a transport
    the monitor did not learn), `sent 3 udp datagrams to 192.0.2.1:53`."""
    if n.refused:
        what = "connect to" if n.op == "connect" else "send to"
        return f"{what} {ip}:{n.port} ({n.transport}) refused by network policy"
    failed = f" (failed {n.result})" if n.result < 0 else ""
    if n.op == "send" or n.transport in DATAGRAM_TRANSPORTS:
        plural = "s" if n.sent != 1 else ""
        via = " (connected)" if n.op == "connect" else ""
        return f"sent {n.sent} {n.transport} datagram{plural} to {ip}:{n.port}{via}{failed}"
    how = "" if n.transport == "unknown" else f" ({n.transport})"
    return f"connected to {ip}:{n.port}{how}{failed}"


def allowed_names(ctx: CallContext, policy: Policy) -> set[str]:
    names = set(policy.allowed_domains) | set(ctx.task_hosts)
    for text in ctx.arg_texts:
        names.update(url_hosts(text))
        names.update(bare_hosts(text, None))
    return {normalize_domain(n) for n in names}


def unexpected_network(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    tree = view.tree
    if not tree.traced:
        return []
    spec = policy.spec.rules.unexpected_network
    names = allowed_names(ctx, policy)
    # under a kernel-enforced allowlist its names are derived, and every connection the
    # kernel let through went to one of them or to a resolver (monitor/egress.py)
    names.update(normalize_domain(n) for n in tree.network_policy)
    ips = set(policy.allowed_addresses)
    ips.update(ip for n in names if (ip := canonical_ip(n)) is not None)
    ev: list[str] = []
    refused: list[str] = []
    seen_names: set[str] = set()
    for who, d in _all_dns(tree):
        name = normalize_domain(d.name)
        if domain_within(name, names):
            ips.update(ip for a in d.answers if (ip := canonical_ip(a)) is not None)
        elif d.direction == "query" and name not in seen_names:
            seen_names.add(name)
            ev.append(f"{who} looked up {name} ({d.qtype})")
    for p in tree.processes:
        for n in p.net:
            if not n.egress:  # an accept, or a datagram socket's connect that sent nothing
                continue
            if tree.network_policy and not n.refused:
                continue
            ip = canonical_ip(n.address) or n.address
            if ip in ips or n.port in spec.allowed_ports:
                if n.refused:  # derived, yet not in the allowlist: the policy's word, recorded
                    refused.append(f"{label(p)} {egress_text(n, ip)}")
                continue
            if spec.allow_loopback and is_loopback(ip):
                continue
            ev.append(f"{label(p)} {egress_text(n, ip)}")
    if not ev and refused:
        v = violation(
            "unexpected-network",
            policy,
            "post",
            "refused by network policy: destinations the call named are not in the allowlist",
            refused,
        )
        v.mode = "observe"  # stopped in the kernel, and asked for: evidence, not a deny
        return [v]
    if not ev:
        return []
    return [
        violation(
            "unexpected-network",
            policy,
            "post",
            "network destinations not derived from the arguments, task or allowlist",
            ev,
        )
    ]


def incomplete_tree(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    tree = view.tree
    ev = [f"tree incomplete: {why}" for why in tree.incomplete_reasons]
    if not tree.complete and not ev:
        ev.append("tree incomplete (no reason given)")
    ev.extend(f"{kind}: {n} events dropped" for kind, n in tree.drops.items() if n)
    workers = set(tree.workers)
    running = [p for p in tree.processes if p.still_running and p.learned == "observed"]
    ev.extend(
        f"{label(p)} ({p.command_line[:120]}) still running after the call"
        for p in running
        if p.key not in workers
    )
    # A worker (alive once the call settled: a helper, a browser) is evidence, never a deny by
    # itself: what it does later is in a later call's tree or the between-call record.
    left = [
        f"{label(p)} ({p.command_line[:120]}) left running as a worker of the server"
        for p in running
        if p.key in workers
    ]
    why = "the behavior tree is incomplete or the call left processes running"
    if ev:
        return [violation("incomplete-tree", policy, "post", why, ev + left)]
    if left:
        why = "the call left a worker running (evidence: its later events are watched)"
        return [
            Violation(
                rule="incomplete-tree",
                phase="post",
                mode="observe",
                reason=why,
                evidence=left[:MAX_EVIDENCE],
            )
        ]
    return []
