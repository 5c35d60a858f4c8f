"""Real eBPF + a real resolver on a loopback address, port 53: queries and answers in the tree."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from dns_server import ANSWER_A, ANSWER_AAAA, resolver_address, serve_dns
from monitor_harness import traced

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]
PY = sys.executable

RAW_LOOKUP = """
import socket, sys
from dnslib import DNSRecord
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(DNSRecord.question("exfil.example.test", "A").pack(), (sys.argv[1], 53))
print(DNSRecord.parse(s.recvfrom(4096)[0]).rr[0].rdata)
"""


async def test_raw_udp_lookup_name_and_answer_attributed() -> None:
    host = resolver_address()
    async with anyio.create_task_group() as tg:
        await tg.start(serve_dns, host)
        tree = await traced([PY, "-c", RAW_LOOKUP, host])
        tg.cancel_scope.cancel()
    dns = [d for p in tree.processes for d in p.dns]
    query = [d for d in dns if d.direction == "query"]
    resp = [d for d in dns if d.direction == "response"]
    assert [(d.name, d.qtype, d.server) for d in query] == [
        ("exfil.example.test", "A", f"{host}:53")
    ]
    assert [(d.name, d.answers) for d in resp] == [("exfil.example.test", [ANSWER_A])]
    (py,) = [p for p in tree.processes if p.dns]
    assert all(d.pid == py.pid for d in dns)
    assert not tree.dns  # everything was attributed


async def test_glibc_resolver_connected_socket_lookup(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    host = resolver_address()
    conf.write_text(f"nameserver {host}\noptions attempts:1 timeout:3\n")
    code = "import socket; print(socket.getaddrinfo('glibc.example.test', 80))"
    cmd = [
        "unshare",
        "-m",
        "sh",
        "-c",
        f'mount --bind {conf} /etc/resolv.conf && exec {PY} -c "{code}"',
    ]
    async with anyio.create_task_group() as tg:
        await tg.start(serve_dns, host)
        tree = await traced(cmd)
        tg.cancel_scope.cancel()
    dns = [d for p in tree.processes for d in p.dns]
    names = {(d.direction, d.qtype, d.name) for d in dns}
    assert ("query", "A", "glibc.example.test") in names
    assert ("query", "AAAA", "glibc.example.test") in names
    answers = {a for d in dns if d.direction == "response" for a in d.answers}
    assert {ANSWER_A, ANSWER_AAAA} <= answers
    assert all(d.server == f"{host}:53" for d in dns)
