"""Post-execution network and completeness rules.

A destination is derived when its DNS name (or the name that resolved to its address) is
allowlisted or named by the task or by a destination argument (not a URL in prose or file
content: `off-task-url`'s data), or when the address itself is written there. Traffic to
the allowed ports of the sandbox's own resolvers (`BehaviorTree.resolvers`) passes, the names
it resolves still checked; port 53 of any other address is egress. Loopback passes only under
`allow_loopback` (`loopback_allowed`, shared with the online rule). A lookup of an
underived name carries only the name: with no egress in the call and no data of the call
in the name (`carries_data`: encoded, long or random labels, an argument's text, a payload
split over many names, or a secret read in the same call) it is recorded (observe), as a
library's telemetry probe is; with egress or data it is denied.
Only egress counts (`NetEvent.egress`): a datagram socket's connect() sends nothing, so a
UDP connect with no datagram after it (a reachability probe) is observed, not a violation.
Under a kernel-enforced allowlist (`--allow-domain`) its names are derived and a connection
the kernel let through is allowed; one it refused is evidence ("refused by network policy").
Incomplete trees and children that outlive the call are reported under their own rule.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Iterable
from fnmatch import fnmatch
from typing import Any

from ..model import DATAGRAM_TRANSPORTS, BehaviorTree, DnsEvent, NetEvent, Violation
from .context import CallContext
from .patterns import HOME_RE, canonical_ip, domain_within, is_loopback, normalize_domain
from .policy import Policy
from .rules_files import secret_reads
from .rules_pre import MAX_EVIDENCE, _written_prose, violation
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
    size = f", {n.bytes_sent} bytes" if n.bytes_sent else ""
    if n.op == "send" or n.transport in DATAGRAM_TRANSPORTS:
        plural = "s" if n.sent != 1 else ""
        via = " (connected)" if n.op == "connect" else ""
        return f"sent {n.sent} {n.transport} datagram{plural} to {ip}:{n.port}{via}{failed}{size}"
    how = "" if n.transport == "unknown" else f" ({n.transport})"
    return f"connected to {ip}:{n.port}{how}{failed}{size and size + ' sent'}"


def resolver_port(policy: Policy, resolvers: Iterable[str], ip: str, port: int) -> bool:
    """Is `ip:port` a resolver port (`allowed_ports`) of one of the sandbox's own resolvers
    (`BehaviorTree.resolvers`: its /etc/resolv.conf, or the policy's `dns`)? A datagram to
    port 53 of any other address is egress like any other (a DNS tunnel, plain UDP exfil)."""
    if port not in policy.spec.rules.unexpected_network.allowed_ports:
        return False
    return ip in {canonical_ip(r) or r for r in resolvers}


def loopback_allowed(policy: Policy, ip: str) -> bool:
    """The one loopback definition of the online and post rules: exempt only when the
    policy says so (`allow_loopback`); under `--network host` loopback is the host's."""
    return policy.spec.rules.unexpected_network.allow_loopback and is_loopback(ip)


def exempt_destination(policy: Policy, resolvers: Iterable[str], ip: str, port: int) -> bool:
    """A destination no call needs to derive: a resolver's port, or allowed loopback."""
    return resolver_port(policy, resolvers, ip, port) or loopback_allowed(policy, ip)


# AF_UNIX sockets a sandbox makes itself live in its temp dirs, its home or its workspace;
# one elsewhere (a mounted docker.sock, a host daemon's socket) is another program's door
OWN_SOCKET_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/user")


def foreign_unix(ctx: CallContext, view: TreeView, policy: Policy) -> list[str]:
    """Evidence for each AF_UNIX connect that reached a socket the sandbox did not make: a
    path outside its temp dirs, home and workspace that neither the call (an argument, the
    task) names nor the policy allows (`allowed_unix`). Refused connects reached nothing.
    An abstract name (`@name`) is judged only when the sandbox shares the host's network
    (`BehaviorTree.host_network`) and another program of the host holds the socket bound to
    it (`UnixEvent.holder`, looked up once the call settled); in its own network namespace
    every abstract name is the sandbox's own."""
    allowed = policy.spec.rules.unexpected_network.allowed_unix
    named = {t.strip() for t in ctx.arg_texts}
    task = ctx.task_text or ""
    seeded = (p.cwd for p in view.tree.processes if p.learned == "seeded" and p.cwd)
    roots = [*OWN_SOCKET_ROOTS, *[w for w in seeded if w != "/"]]
    out = []
    for p in view.tree.processes:
        for u in p.unix:
            if u.abstract and u.result >= 0 and u.holder == "host" and view.tree.host_network:
                if not any(fnmatch(u.path, g) for g in allowed) and not _names_abstract(
                    u.path, task, named
                ):
                    out.append(
                        f"{label(p)} connected to abstract unix socket {u.path} (the host's: "
                        "the sandbox shares the host network)"
                    )
                continue
            if u.abstract or u.result < 0 or not u.path.startswith("/"):
                continue
            path = u.path
            if any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
                continue
            if re.match(HOME_RE + "/", path) or any(fnmatch(path, g) for g in allowed):
                continue
            if path in task or path in named:  # the call's own words name this socket
                continue
            out.append(f"{label(p)} connected to unix socket {path} (not the sandbox's own)")
    return out


def _names_abstract(name: str, task: str, named: set[str]) -> bool:
    """Do the call's words name the abstract socket `@name` (with or without its `@`)?"""
    bare = name.lstrip("@")
    return bool(bare) and (bare in task or name in named or bare in named)


def allowed_names(ctx: CallContext, policy: Policy) -> set[str]:
    """The allowlist, the task's hosts and the hosts the arguments point to: a URL inside a
    non-command tool's prose or file content is data there (as for `off-task-url`), not a
    destination the call may reach."""
    names = set(policy.allowed_domains) | set(ctx.task_hosts)
    command_tool = policy.is_command_tool(ctx.call.tool, ctx.input_schema)
    for key, text in ctx.arg_items:
        if _written_prose(key, text, command_tool):
            continue
        names.update(url_hosts(text))
        names.update(bare_hosts(text, None))
    return {normalize_domain(n) for n in names}


# A DNS name can carry data in its labels (DNS exfiltration). A label reads as data when it
# is long, high in entropy, hex, or decodes (base64/base32) to text; or when it repeats an
# argument's text or a canary marker; or when the call looks up many names under one parent
# (a payload split into short labels). A secret read in the same call makes any lookup data.
LONG_LABEL = 24
ENTROPY_LABEL = 14  # labels this long are judged on their entropy (bits per character) ...
ENTROPY_BITS = 3.7  # ... above this (ordinary host words stay well below it)
HEX_LABEL = 8
DECODED = 6  # a label decoding to this much plain text is encoded text ...
MIXED_DECODED = 3  # ... this much when its case is mixed as sent (base64 of a short secret)
ARG_LABEL = 5  # a label this long found in an argument's text is that text, sent out
SPLIT_NAMES = 3  # distinct underived names under one parent domain in one call


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


_PLAIN = frozenset(" _-.:,/=@+")  # what text encoded into a label is made of, besides alnum


def _coded(label: str) -> bool:
    """Digits among letters, or mixed case: what encodings look like and host words do not."""
    low = label.lower()
    has_digit = any(c.isdigit() for c in low) and any(c.isalpha() for c in low)
    return has_digit or (label != low and label != label.upper())


def _decodes(label: str) -> bool:
    """Does the label decode (base64 or base32) to plain text (letters, digits, spaces,
    `_-.:,/=@+`) of `DECODED` characters, or `MIXED_DECODED` when its case is mixed?
    Ordinary host words decode to symbols or bytes."""
    mixed = label != label.lower() and label != label.upper()  # as sent: hosts are one case
    forms = [("64", label + pad) for pad in ("", "=", "==")]
    forms += [("32", label.upper() + pad) for pad in ("", "=", "===", "====", "======")]
    for base, text in forms:
        try:
            raw = base64.b64decode(text, validate=True) if base == "64" else base64.b32decode(text)
        except (binascii.Error, ValueError):
            continue
        text = raw.decode("latin-1")
        plain = all(c.isascii() and (c.isalnum() or c in _PLAIN) for c in text)
        if plain and len(text) >= (MIXED_DECODED if base == "64" and mixed else DECODED):
            return True
    return False


def label_data(label: str, arg_text: str, markers: list[str]) -> str | None:
    low = label.lower()
    if len(low) >= LONG_LABEL:
        return f"label {label!r} is {len(label)} characters"
    if len(low) >= HEX_LABEL and all(c in "0123456789abcdef" for c in low):
        return f"label {label!r} is hex"
    if len(low) >= ENTROPY_LABEL and _entropy(low) > ENTROPY_BITS and _coded(label):
        return f"label {label!r} is high in entropy"
    if _decodes(label):
        return f"label {label!r} decodes to text"
    if len(low) >= ARG_LABEL and low in arg_text:
        return f"label {label!r} repeats an argument"
    if any(m and (low in m.lower() or m.lower() in low) for m in markers if len(low) >= 4):
        return f"label {label!r} holds a canary marker"
    return None


def carries_data(ctx: CallContext, view: TreeView, names: list[str]) -> dict[str, str]:
    """The looked-up names (as sent) that can carry the call's data: normalised name -> why
    (a `; ...` suffix for the evidence)."""
    if not names:
        return {}
    out: dict[str, str] = {}
    if secrets := secret_reads(ctx, view):
        read = f"; the call also read {secrets[0].path}"
        return {normalize_domain(n): read for n in names}
    arg_text = "\n".join(ctx.arg_texts).lower()
    markers = list(ctx.canaries.values())
    low = [normalize_domain(n) for n in names]
    parents = Counter(n.split(".", 1)[1] for n in low if n.count(".") >= 2)
    for raw, n in zip(names, low, strict=True):
        parent = n.split(".", 1)[1] if n.count(".") >= 2 else ""
        if parent and parents[parent] >= SPLIT_NAMES:
            out[n] = f"; {parents[parent]} names looked up under {parent}"
            continue
        # labels as sent: case carries data (base64) though DNS ignores it
        found = (label_data(part, arg_text, markers) for part in raw.rstrip(".").split(".")[:-1])
        if (why := next((w for w in found if w is not None), None)) is not None:
            out[n] = f"; {why}"
    return out


def unexpected_network(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    tree = view.tree
    if not tree.traced:
        return []
    names = allowed_names(ctx, policy)
    # under a kernel-enforced allowlist its names are derived, and every connection the
    # kernel let through went to one of them or to a resolver (monitor/egress.py)
    names.update(normalize_domain(n) for n in tree.network_policy)
    ips = set(policy.allowed_addresses)
    ips.update(ip for n in names if (ip := canonical_ip(n)) is not None)
    ev: list[str] = []
    refused: list[str] = []
    seen_names: set[str] = set()
    lookups: list[tuple[str, str, str, str]] = []
    for who, d in _all_dns(tree):
        name = normalize_domain(d.name)
        if domain_within(name, names):
            ips.update(ip for a in d.answers if (ip := canonical_ip(a)) is not None)
        elif d.direction == "query" and name not in seen_names:
            seen_names.add(name)
            lookups.append((who, name, d.name, d.qtype))
    carrying = carries_data(ctx, view, [raw for _, _, raw, _ in lookups])
    ev.extend(
        f"{who} looked up {name} ({qtype}){carrying.get(name, '')}"
        for who, name, _, qtype in lookups
    )
    egress = bool(carrying)  # a name carrying data is egress; so is any connection below
    for p in tree.processes:
        for n in p.net:
            if not n.egress:  # an accept, or a datagram socket's connect that sent nothing
                continue
            if tree.network_policy and not n.refused:
                continue
            ip = canonical_ip(n.address) or n.address
            if ip in ips or resolver_port(policy, tree.resolvers, ip, n.port):
                if n.refused:  # derived, yet not in the allowlist: the policy's word, recorded
                    refused.append(f"{label(p)} {egress_text(n, ip)}")
                continue
            if loopback_allowed(policy, ip):
                continue
            ev.append(f"{label(p)} {egress_text(n, ip)}")
            egress = True
    if unix := foreign_unix(ctx, view, policy):
        ev.extend(unix)
        egress = True
    if ev and not egress:  # lookups alone, none carrying the call's data
        v = violation(
            "unexpected-network",
            policy,
            "post",
            "names looked up that nothing in the call derives; no connection to them and no "
            "data of the call in them: recorded",
            ev + refused,
        )
        v.mode = "observe"  # a lookup alone carries no data out: evidence, not egress
        return [v]
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
