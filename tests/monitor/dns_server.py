"""A tiny authoritative resolver on <random loopback address>:53 for tests (dnslib wire format).

Answers every A query with ANSWER_A, AAAA with ANSWER_AAAA; runs as an anyio task. Each test
picks its own 127.x.y.z so parallel test runs on one host never fight over port 53.
"""

from __future__ import annotations

import secrets

import anyio
import anyio.abc
from dnslib import AAAA, QTYPE, RR, A, DNSRecord

ANSWER_A = "10.20.30.40"
ANSWER_AAAA = "fd00::1234"


def resolver_address() -> str:
    a, b, c = (secrets.randbelow(250) + 2 for _ in range(3))
    return f"127.{a}.{b}.{c}"


async def serve_dns(host: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    async with await anyio.create_udp_socket(local_host=host, local_port=53) as sock:
        task_status.started()
        async for packet, (host, port) in sock:
            query = DNSRecord.parse(packet)
            reply = query.reply()
            qname, qtype = query.q.qname, query.q.qtype
            if qtype == QTYPE.A:
                reply.add_answer(RR(qname, QTYPE.A, rdata=A(ANSWER_A), ttl=60))
            elif qtype == QTYPE.AAAA:
                reply.add_answer(RR(qname, QTYPE.AAAA, rdata=AAAA(ANSWER_AAAA), ttl=60))
            await sock.sendto(reply.pack(), host, port)
