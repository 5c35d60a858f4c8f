"""Network policy: a kernel-enforced allowlist on one sandbox's cgroup (bpf/egress.bpf.c).

`NetworkPolicy.attach()` puts the cgroup's allowed addresses, its resolvers (port 53 only)
and the allowed names (whose DNS answers the kernel learns, before the server can read
them) into the maps, then attaches connect/sendmsg hooks (EPERM at once) and skb filters
(every other packet to or from an address not allowed is dropped). Refusals are
EV_NET_REFUSED records in the monitor's ring: they land in the call's behavior tree.
`resolve_names()` pre-resolves allowed names through the same resolvers (bounded waits).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..errors import BpfLoadError, GuardError
from .dns import decode_dns
from .kinds import DNAME_MAX, NP_ANY, NP_DNS
from .loader import BpfProgram
from .monitor import Watch

AF_INET, AF_INET6 = 2, 10
RESOLVE_TIMEOUT_S = 2.0  # per resolver and query type: a start-up cost, so kept short
# (function, bcc program type, attach type): BPF_CGROUP_INET4_CONNECT = 10, INET6_CONNECT
# = 11, UDP4_SENDMSG = 14, UDP6_SENDMSG = 15, INET_INGRESS = 0, INET_EGRESS = 1
_SOCK_ADDR, _SKB, _SOCK = 18, 8, 9
PROGRAMS = (
    ("mt_np_connect4", _SOCK_ADDR, 10),
    ("mt_np_connect6", _SOCK_ADDR, 11),
    ("mt_np_sendmsg4", _SOCK_ADDR, 14),
    ("mt_np_sendmsg6", _SOCK_ADDR, 15),
    ("mt_np_egress", _SKB, 1),
    ("mt_np_ingress", _SKB, 0),
    ("mt_np_bind4", _SOCK, 12),  # BPF_CGROUP_INET4_POST_BIND: the sandbox's own ports
    ("mt_np_bind6", _SOCK, 13),
)


def wire_name(name: str) -> bytes:
    """`registry.npmjs.org` -> b"\\x08registry\\x05npmjs\\x03org\\x00" (lower case)."""
    labels = [p for p in name.strip().rstrip(".").lower().split(".") if p]
    out = b"".join(bytes([len(p)]) + p.encode("idna") for p in labels) + b"\0"
    if not labels or any(len(p) > 63 for p in labels) or len(out) >= DNAME_MAX:
        raise ValueError(f"not a DNS name the policy can hold: {name!r}")
    return out


def ip_literal(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip().strip("[]")))
    except ValueError:
        return None


def resolv_conf_servers(path: str = "/etc/resolv.conf") -> list[str]:
    """The nameservers a host-network container gets (Docker copies this file)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and ip_literal(parts[1]):
            out.append(str(ip_literal(parts[1])))
    return out


def sandbox_resolvers(pid: int, dns: list[str]) -> list[str]:
    """The resolvers a sandbox really uses: the nameservers of its /etc/resolv.conf as mounted
    in it (read through /proc/<pid>/root), and the policy's `dns`. The only addresses the
    rules exempt on a resolver port (audit/rules_net.py `resolver_port`)."""
    found = resolv_conf_servers(f"/proc/{pid}/root/etc/resolv.conf") if pid > 0 else []
    found += [ip for d in dns if (ip := ip_literal(d)) is not None]
    return sorted(set(found))


def _query(name: str, qtype: int) -> tuple[int, bytes]:
    qid = secrets.randbelow(65536)
    return qid, struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + wire_name(name) + struct.pack(
        ">HH", qtype, 1
    )


async def _ask(server: str, name: str, qtype: int) -> list[str]:
    qid, packet = _query(name, qtype)
    v6 = ":" in server
    async with await anyio.create_connected_udp_socket(
        server, 53, family=socket.AF_INET6 if v6 else socket.AF_INET
    ) as sock:
        await sock.send(packet)
        with anyio.move_on_after(RESOLVE_TIMEOUT_S):
            while True:
                reply = await sock.receive()
                if len(reply) >= 2 and struct.unpack_from(">H", reply)[0] == qid:
                    dns = decode_dns(reply, 0, None, None)
                    return [] if dns is None else [a for a in dns.answers if ip_literal(a)]
    return []


async def resolve_names(names: list[str], resolvers: list[str]) -> dict[str, list[str]]:
    """name -> its A and AAAA addresses. Every (name, type) is asked at once, of the first
    resolver, then of the next for the names still without an answer: a start-up waits about
    RESOLVE_TIMEOUT_S per silent resolver, not per name."""
    out: dict[str, set[str]] = {n: set() for n in names if not ip_literal(n)}

    async def ask(server: str, name: str, qtype: int) -> None:
        try:
            out[name].update(await _ask(server, name, qtype))
        except (OSError, anyio.BrokenResourceError):  # trio: a refused UDP peer is "broken"
            pass  # unreachable resolver: the next one is asked

    for server in resolvers:
        pending = [n for n, found in out.items() if not found]
        if not pending:
            break
        async with anyio.create_task_group() as tg:
            for name in pending:
                for qtype in (1, 28):
                    tg.start_soon(ask, server, name, qtype)
    return {n: sorted(found) for n, found in out.items()}


@dataclass
class NetworkPolicy:
    """The allowlist of one cgroup, attached until `detach()`."""

    program: BpfProgram
    cgroup_id: int
    cgroup_path: str
    names: list[str]
    resolvers: list[str]
    addresses: list[str] = field(default_factory=list)
    _fd: int = -1

    def _bcc(self) -> Any:
        return self.program.bcc

    def _addr_key(self, table: Any, ip: str) -> Any:
        a = ipaddress.ip_address(ip)
        key = table.Key()
        key.cgroup_id = self.cgroup_id
        key.family = AF_INET if a.version == 4 else AF_INET6
        for i, b in enumerate(a.packed):
            key.addr[i] = b
        return key

    def allow_address(self, ip: str, flags: int = NP_ANY) -> None:
        table = self._bcc()["np_addrs"]
        key = self._addr_key(table, ip)
        try:
            flags |= int(table[key].value)
        except KeyError:
            pass
        table[key] = table.Leaf(flags)

    def allowed(self, ip: str) -> int:
        """The NP_* bits of an address for this cgroup (0: refused)."""
        table = self._bcc()["np_addrs"]
        try:
            return int(table[self._addr_key(table, ip)].value)
        except KeyError:
            return 0

    def attach(self) -> None:
        bpf = self._bcc()
        names = bpf["np_names"]
        for name in self.names:
            if ip_literal(name):
                self.allow_address(str(ip_literal(name)))
                continue
            key = names.Key()
            key.cgroup_id = self.cgroup_id
            for i, b in enumerate(wire_name(name)):
                key.name[i] = b
            names[key] = names.Leaf(1)
        for ip in self.resolvers:
            self.allow_address(ip, NP_DNS)
        for ip in self.addresses:
            self.allow_address(ip)
        try:
            answer = bpf.load_func(b"mt_np_answer", _SKB)  # the DNS answers' tail call
            bpf["np_tail"][0] = answer
            self._fd = os.open(self.cgroup_path, os.O_RDONLY | os.O_DIRECTORY)
            for fn_name, prog_type, attach_type in PROGRAMS:
                fn = bpf.load_func(fn_name.encode(), prog_type, attach_type=attach_type)
                bpf.attach_func(fn, self._fd, attach_type)
        except Exception as exc:
            self.detach()
            where = self.cgroup_path
            raise BpfLoadError(f"network policy: cannot attach to {where}: {exc}") from exc

    def detach(self) -> None:
        bpf = self._bcc()
        if self._fd >= 0:
            for fn_name, prog_type, attach_type in PROGRAMS:
                try:
                    fn = bpf.load_func(fn_name.encode(), prog_type, attach_type=attach_type)
                    bpf.detach_func(fn, self._fd, attach_type)
                except Exception:
                    pass  # the cgroup may be gone already (its programs went with it)
            os.close(self._fd)
            self._fd = -1
        for table_name in ("np_addrs", "np_names", "np_reported", "np_ports"):
            table = bpf[table_name]
            for key in [k for k in table.keys() if k.cgroup_id == self.cgroup_id]:
                try:
                    del table[key]
                except KeyError:
                    pass


@asynccontextmanager
async def open_network_policy(
    watch: Watch, names: list[str], resolvers: list[str]
) -> AsyncIterator[NetworkPolicy]:
    """Enforce `names` on a watched sandbox until exit: resolve them first (through the
    sandbox's own resolvers: the same answers), attach, and stamp the watch's trees."""
    program = watch._monitor.program
    if not isinstance(program, BpfProgram):  # an agent's: its maps are not ours to attach
        raise GuardError("--allow-domain needs the in-process monitor (MTGUARD_AGENT=off)")
    servers = resolvers or resolv_conf_servers()
    if not servers:
        raise GuardError("--allow-domain: no resolver in /etc/resolv.conf; set [sandbox] dns")
    for name in names:
        if not ip_literal(name):
            wire_name(name)  # a name the kernel cannot hold fails here, with its text
    found = await resolve_names(names, servers)
    policy = NetworkPolicy(
        program,
        watch.cgroup_id,
        watch.cgroup_path,
        names,
        servers,
        sorted({ip for ips in found.values() for ip in ips}),
    )
    policy.attach()
    watch.network_policy = list(names)
    try:
        yield policy
    finally:
        watch.network_policy = []
        policy.detach()
