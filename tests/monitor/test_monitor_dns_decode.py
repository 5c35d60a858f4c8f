"""DNS wire decoding: queries, answers, compression, TCP framing, truncation, garbage."""

from __future__ import annotations

import os

from dnslib import AAAA, CNAME, QTYPE, RR, TXT, A, DNSRecord

from mtguard_rt.monitor.dns import decode_dns


def test_query_and_response_with_compression() -> None:
    q = DNSRecord.question("a.b.example.org", "AAAA")
    dq = decode_dns(q.pack(), 1, "127.0.0.1:53", 5)
    assert dq is not None and (dq.direction, dq.name, dq.qtype, dq.pid) == (
        "query",
        "a.b.example.org",
        "AAAA",
        5,
    )
    r = q.reply()
    r.add_answer(RR("a.b.example.org", QTYPE.CNAME, rdata=CNAME("c.example.org")))
    r.add_answer(RR("c.example.org", QTYPE.AAAA, rdata=AAAA("2001:db8::7")))
    r.add_answer(RR("c.example.org", QTYPE.A, rdata=A("192.0.2.9")))
    r.add_answer(RR("c.example.org", QTYPE.TXT, rdata=TXT(["k=v", "x"])))
    dr = decode_dns(r.pack(), 2, None, None)
    assert dr is not None and dr.direction == "response"
    assert dr.answers == ["c.example.org", "2001:db8::7", "192.0.2.9", "k=v x"]


def test_tcp_framing_is_unwrapped() -> None:
    raw = DNSRecord.question("tcp.example", "A").pack()
    d = decode_dns(len(raw).to_bytes(2, "big") + raw, 1, None, None)
    assert d is not None and d.name == "tcp.example"


def test_cut_response_keeps_what_was_read() -> None:
    r = DNSRecord.question("big.example", "A").reply()
    for i in range(60):
        r.add_answer(RR("big.example", QTYPE.A, rdata=A(f"10.0.0.{i}")))
    d = decode_dns(r.pack()[:512], 1, None, None)
    assert d is not None and d.answers[0] == "10.0.0.0" and d.answers[-1] == "<truncated>"


def test_garbage_and_pointer_loops_do_not_crash() -> None:
    assert decode_dns(b"", 1, None, None) is None
    assert decode_dns(b"\x00" * 11, 1, None, None) is None
    loop = bytes.fromhex("000001000001000000000000") + b"\xc0\x0c" + b"\x00\x01\x00\x01"
    assert decode_dns(loop, 1, None, None) is None
    for seed in range(200):
        blob = os.urandom(seed % 64 + 12)
        decode_dns(blob, 1, None, None)  # must return or None, never raise
