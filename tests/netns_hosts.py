"""Test hosts for the network policy: a netns `mtg-test-*` of our own behind a veth pair.

10.200.N.2 runs a DNS server (names starting with "other" -> 10.200.N.3, "many..." -> a CNAME
then 10.200.N.40-47, every other name -> 10.200.N.2) and an HTTP server on :8080; 10.200.N.3
another HTTP server. The host side of the veth is 10.200.N.1/24. GET /to-other redirects to
10.200.N.3. Each host also has the IPv6 address `v6(ip)` (fd42:200:N::X) with an HTTP server
on it. Torn down (netns, veth, servers) on exit. Needs root.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

PY = sys.executable
SERVERS = """
import socket, sys, threading
from dnslib import CNAME, QTYPE, RR, A, DNSRecord
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
dns_ip, other_ip = sys.argv[1], sys.argv[2]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/to-other":  # a redirect to the other host's address
            self.send_response(302); self.send_header("Location", f"http://{other_ip}:8080/")
            self.send_header("Content-Length", "0"); self.end_headers(); return
        body = f"hello from {self.server.server_address[0]}".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
class H6(ThreadingHTTPServer):
    address_family = socket.AF_INET6
for ip in (dns_ip, other_ip, *sys.argv[3:]):
    cls = H6 if ":" in ip else ThreadingHTTPServer
    threading.Thread(target=cls((ip, 8080), H).serve_forever, daemon=True).start()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((dns_ip, 53))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(4096)
    q = DNSRecord.parse(data); r = q.reply(); name = str(q.q.qname)
    if q.q.qtype == QTYPE.A and name.startswith("many"):  # a CDN: a CNAME, then 8 addresses
        r.add_answer(RR(q.q.qname, QTYPE.CNAME, rdata=CNAME("edge.cdn.test"), ttl=60))
        for i in range(8):
            r.add_answer(RR("edge.cdn.test", QTYPE.A, rdata=A(dns_ip[:-1] + str(40 + i)), ttl=60))
    elif q.q.qtype == QTYPE.A:
        ip = other_ip if name.startswith("other") else dns_ip
        r.add_answer(RR(q.q.qname, QTYPE.A, rdata=A(ip), ttl=60))
    s.sendto(r.pack(), peer)
"""


def v6(ip: str) -> str:
    """A test host's IPv6 address: 10.200.N.X -> fd42:200:N::X."""
    _, _, n, x = ip.split(".")
    return f"fd42:200:{n}::{x}"


async def sh(*cmd: str, check: bool = True) -> None:
    with anyio.fail_after(20):
        await anyio.run_process(cmd, check=check)


@asynccontextmanager
async def open_test_hosts() -> AsyncIterator[tuple[str, str]]:
    """A netns with two test hosts; yields (dns_ip, other_ip)."""
    used = (await anyio.run_process(["ip", "-4", "-o", "addr"])).stdout.decode()
    tag, n = secrets.token_hex(3), secrets.randbelow(200) + 20
    while f" 10.200.{n}." in used:  # another test's hosts (parallel runs on one machine)
        n = secrets.randbelow(200) + 20
    ns, host_if, ns_if = f"mtg-test-{tag}", f"mtgh{tag}", f"mtgn{tag}"
    dns_ip, other_ip = f"10.200.{n}.2", f"10.200.{n}.3"
    await sh("ip", "netns", "add", ns)
    try:
        await sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        await sh("ip", "link", "set", ns_if, "netns", ns)
        await sh("ip", "addr", "add", f"10.200.{n}.1/24", "dev", host_if)
        await sh("ip", "link", "set", host_if, "up")
        await sh("ip", "addr", "add", f"{v6(f'10.200.{n}.1')}/64", "dev", host_if, "nodad")
        for ip in (dns_ip, other_ip):
            await sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", ns_if)
            await sh("ip", "-n", ns, "addr", "add", f"{v6(ip)}/64", "dev", ns_if, "nodad")
        await sh("ip", "-n", ns, "link", "set", ns_if, "up")
        await sh("ip", "-n", ns, "link", "set", "lo", "up")
        servers = await anyio.open_process(
            [
                "ip",
                "netns",
                "exec",
                ns,
                PY,
                "-c",
                SERVERS,
                dns_ip,
                other_ip,
                v6(dns_ip),
                v6(other_ip),
            ],
            stderr=None,
        )
        try:
            assert servers.stdout is not None
            with anyio.fail_after(15):
                assert (await servers.stdout.receive()).startswith(b"ready")
            yield dns_ip, other_ip
        finally:
            with anyio.CancelScope(shield=True):
                servers.kill()
                with anyio.move_on_after(5):
                    await servers.wait()
                await servers.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await sh("ip", "link", "del", host_if, check=False)  # gone with the netns, usually
            await sh("ip", "netns", "del", ns)
