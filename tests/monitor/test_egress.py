"""Real kernel: the network policy on a cgroup, against test hosts in a netns of our own.

Test hosts in a netns of our own (tests/netns_hosts.py): 10.200.N.2 (DNS and HTTP) and
10.200.N.3 (HTTP). A process in a policed cgroup resolves a name under an
allowed one (the kernel learns the answer), fetches from it, and is refused 10.200.N.3: EPERM
at once, and the refusal is in the behavior tree with its address and process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest
from monitor_harness import CALL, gated_cgroup

from mtguard_rt.monitor import MonitorConfig, open_monitor
from mtguard_rt.monitor.egress import RESOLVE_TIMEOUT_S, NetworkPolicy, resolve_names, wire_name
from mtguard_rt.monitor.kinds import NP_ANY, NP_DNS
from tests.netns_hosts import open_test_hosts, v6

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]
PY = sys.executable

CLIENT = """
import json, socket, sys
from dnslib import DNSRecord
ns, other = sys.argv[1], sys.argv[2]
def lookup(name):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(DNSRecord.question(name, "A").pack(), (ns, 53))
    return str(DNSRecord.parse(s.recvfrom(4096)[0]).rr[0].rdata)
def fetch(ip):
    try:
        c = socket.create_connection((ip, 8080), timeout=5)
    except OSError as e:
        return e.errno
    c.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    data = b""
    while chunk := c.recv(4096):  # HTTP/1.0: the server closes after the body
        data += chunk
    return data.split(b"\\r\\n\\r\\n", 1)[-1].decode()
out = {"addr": lookup("api.Allowed.test")}
out["allowed"] = fetch(out["addr"])
out["other_name"] = lookup("other.example.test")
out["other"] = fetch(other)
out["many"] = lookup("many.allowed.test")  # the CNAME first, then 8 addresses
print(json.dumps(out), flush=True)
"""


@pytest.fixture
async def test_hosts() -> AsyncIterator[tuple[str, str]]:
    async with open_test_hosts() as hosts:
        yield hosts


def test_wire_name() -> None:
    assert wire_name("Registry.NPMJS.org.") == b"\x08registry\x05npmjs\x03org\x00"
    with pytest.raises(ValueError):
        wire_name("")
    with pytest.raises(ValueError):
        wire_name("a" * 64 + ".test")


async def test_pre_resolution_asks_the_resolver(test_hosts: tuple[str, str]) -> None:
    dns_ip, other_ip = test_hosts
    found = await resolve_names(["api.allowed.test", "other.test", "10.9.9.9"], [dns_ip])
    assert found == {"api.allowed.test": [dns_ip], "other.test": [other_ip]}
    with anyio.fail_after(RESOLVE_TIMEOUT_S * 2):  # no resolver on other_ip: the next answers
        again = await resolve_names(["api.allowed.test"], [other_ip, dns_ip])
    assert again == {"api.allowed.test": [dns_ip]}


async def test_allowed_name_reachable_unlisted_address_refused_in_the_kernel(
    test_hosts: tuple[str, str],
) -> None:
    dns_ip, other_ip = test_hosts
    async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon, gated_cgroup() as cg:
        policy = NetworkPolicy(mon.program, cg.id, str(cg.path), ["allowed.test"], [dns_ip])
        policy.attach()
        try:
            assert policy.allowed(dns_ip) == NP_DNS  # the resolver: port 53 only, at first
            async with cg.run([PY, "-c", CLIENT, dns_ip, other_ip]) as proc:
                async with mon.watch(cg.id, str(cg.path)) as watch:
                    async with watch.window(CALL) as window:
                        await cg.release(proc)
                        out = json.loads(await cg.line())
                        with anyio.fail_after(10):
                            await proc.wait()
                        window.response_arrived()
            # learnt in the kernel from the DNS answer to a name under an allowed one
            assert policy.allowed(dns_ip) == NP_DNS | NP_ANY
            assert policy.allowed(other_ip) == 0  # answered for a name not allowed
            base = dns_ip[:-1]  # every address of a long answer, after its CNAME
            assert [policy.allowed(f"{base}{40 + i}") for i in range(8)] == [NP_ANY] * 8
        finally:
            policy.detach()
    assert out == {
        "addr": dns_ip,
        "allowed": f"hello from {dns_ip}",
        "other_name": other_ip,
        "other": 1,  # EPERM, at once
        "many": "edge.cdn.test.",
    }
    tree = window.tree
    refused = [(p.pid, n) for p in tree.processes for n in p.net if n.refused]
    assert [(n.op, n.address, n.port, n.transport, n.result) for _, n in refused] == [
        ("connect", other_ip, 8080, "tcp", -1)
    ]
    (client,) = [p for p in tree.processes if any(n.refused for n in p.net)]
    assert client.exe.startswith("/") and "python" in client.exe
    ok = [n for n in client.net if n.address == dns_ip and n.port == 8080]
    # 0, or EINPROGRESS (a connect with a timeout is non-blocking)
    assert [(n.op, n.result in (0, -115), n.refused) for n in ok] == [("connect", True, 0)]
    assert not policy.allowed(dns_ip)  # detached: the cgroup's entries are gone


CLIENT6 = """
import json, socket, sys
ok6, other6, other4, host_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def connect(family, ip):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((ip, 8080))
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        return data.split(b"\\r\\n\\r\\n", 1)[-1].decode()
    except OSError as e:
        return e.errno
out = {"ok6": connect(socket.AF_INET6, ok6), "other6": connect(socket.AF_INET6, other6)}
out["mapped"] = connect(socket.AF_INET6, "::ffff:" + other4)  # v4-mapped: the IPv4 policy
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", (other4, 9999))
    out["udp"] = 0
except OSError as e:
    out["udp"] = e.errno
listener = socket.socket(); listener.bind(("0.0.0.0", 0)); listener.listen()
port = listener.getsockname()[1]
me = socket.create_connection(("127.0.0.1", port), timeout=5)  # its own listener: passes
peer, _ = listener.accept(); peer.sendall(b"hi"); out["self"] = me.recv(2).decode()
try:  # the host's loopback service: refused
    socket.create_connection(("127.0.0.1", host_port), timeout=5)
    out["host_loopback"] = 0
except OSError as e:
    out["host_loopback"] = e.errno
print(json.dumps(out), flush=True)
print(listener.getsockname()[1], flush=True)
sys.stdin.readline()
"""


async def test_ipv6_literal_allowed_mapped_udp_and_inbound_refused(
    test_hosts: tuple[str, str],
) -> None:
    dns_ip, other_ip = test_hosts
    ok6, other6, host_ip = v6(dns_ip), v6(other_ip), dns_ip[:-1] + "1"  # veth's host side
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as host_service,
        open_monitor(MonitorConfig(settle_max_ms=2000)) as mon,
        gated_cgroup() as cg,
    ):
        host_port = host_service.extra(anyio.abc.SocketAttribute.local_port)
        policy = NetworkPolicy(mon.program, cg.id, str(cg.path), [ok6], [])
        policy.attach()
        try:
            client = [PY, "-c", CLIENT6, ok6, other6, other_ip, str(host_port)]
            async with cg.run(client) as proc:
                async with mon.watch(cg.id, str(cg.path)) as watch:
                    async with watch.window(CALL) as window:
                        await cg.release(proc)
                        out = json.loads(await cg.line())
                        port = int(await cg.line())
                        # from the host's side of the veth: the SYN never reaches it
                        with pytest.raises(TimeoutError):
                            with anyio.fail_after(1):
                                await anyio.connect_tcp(host_ip, port)
                        assert proc.stdin is not None
                        await proc.stdin.send(b"done\n")
                        with anyio.fail_after(10):
                            await proc.wait()
                        window.response_arrived()
        finally:
            policy.detach()
    assert out == {
        "ok6": f"hello from {ok6}",
        "other6": 1,
        "mapped": 1,
        "udp": 1,
        "self": "hi",
        "host_loopback": 1,
    }
    tree = window.tree
    refused = sorted(
        (n.op, n.family, n.address, n.port, n.transport)
        for p in tree.processes
        for n in p.net
        if n.refused
    )
    assert refused == sorted(
        [
            ("connect", "ipv6", other6, 8080, "tcp"),
            ("connect", "ipv4", other_ip, 8080, "tcp"),  # the v4-mapped one
            ("send", "ipv4", other_ip, 9999, "udp"),
            ("connect", "ipv4", "127.0.0.1", host_port, "tcp"),
        ]
    )
    # inbound, dropped in softirq context: no process to name, the peer's address and port
    inbound = {(n.op, n.address, n.transport, n.egress) for n in tree.refused}
    assert inbound == {("accept", host_ip, "tcp", False)}
