"""Decode DNS messages captured on port 53 into `DnsEvent`s (name, type, answers).

A small RFC 1035 reader: header, first question, answer records (A, AAAA, CNAME, PTR, NS,
TXT, MX; others by type number). Compression pointers are followed with a hop limit. A
TCP-framed message (2-byte length prefix) is unwrapped. Malformed input gives `None`.
"""

from __future__ import annotations

import ipaddress
import struct

from ..model import DnsEvent

QTYPES = {
    1: "A",
    2: "NS",
    5: "CNAME",
    6: "SOA",
    12: "PTR",
    15: "MX",
    16: "TXT",
    28: "AAAA",
    33: "SRV",
    65: "HTTPS",
    255: "ANY",
}
_MAX_HOPS = 32


class _Malformed(Exception):
    pass


def _name(msg: bytes, pos: int) -> tuple[str, int]:
    labels: list[str] = []
    end = -1
    for _ in range(_MAX_HOPS * 4):
        if pos >= len(msg):
            raise _Malformed
        n = msg[pos]
        if n == 0:
            return ".".join(labels), (end if end >= 0 else pos + 1)
        if n & 0xC0 == 0xC0:
            if pos + 1 >= len(msg):
                raise _Malformed
            if end < 0:
                end = pos + 2
            pos = ((n & 0x3F) << 8) | msg[pos + 1]
            continue
        label = msg[pos + 1 : pos + 1 + n]
        if len(label) != n:
            raise _Malformed
        labels.append(label.decode("ascii", "backslashreplace"))
        pos += 1 + n
    raise _Malformed


def _rdata(msg: bytes, rtype: int, pos: int, length: int) -> str:
    data = msg[pos : pos + length]
    if rtype == 1 and length == 4:
        return str(ipaddress.IPv4Address(data))
    if rtype == 28 and length == 16:
        return str(ipaddress.IPv6Address(data))
    if rtype in (2, 5, 12):
        return _name(msg, pos)[0]
    if rtype == 15 and length >= 3:
        return _name(msg, pos + 2)[0]
    if rtype == 16:
        out, i = [], 0
        while i < len(data):
            out.append(data[i + 1 : i + 1 + data[i]].decode("utf-8", "backslashreplace"))
            i += 1 + data[i]
        return " ".join(out)
    return data.hex()


def decode_dns(payload: bytes, ts_ns: int, server: str | None, pid: int | None) -> DnsEvent | None:
    msg = bytes(payload)
    if len(msg) >= 14 and struct.unpack_from(">H", msg)[0] == len(msg) - 2:
        msg = msg[2:]
    try:
        if len(msg) < 12:
            raise _Malformed
        _id, flags, qd, an = struct.unpack_from(">HHHH", msg)
        if qd < 1:
            raise _Malformed
        name, pos = _name(msg, 12)
        if pos + 4 > len(msg):
            raise _Malformed
        qtype = struct.unpack_from(">H", msg, pos)[0]
        pos += 4
        for _ in range(qd - 1):
            pos = _name(msg, pos)[1] + 4
    except (_Malformed, struct.error, IndexError, ValueError):
        return None
    answers: list[str] = []
    try:  # a payload cut at DNS_MAX keeps the answers read before the cut
        for _ in range(an):
            pos = _name(msg, pos)[1]
            if pos + 10 > len(msg):
                raise _Malformed
            rtype, _cls, _ttl, rdlen = struct.unpack_from(">HHIH", msg, pos)
            pos += 10
            if pos + rdlen > len(msg):
                raise _Malformed
            answers.append(_rdata(msg, rtype, pos, rdlen))
            pos += rdlen
    except (_Malformed, struct.error, IndexError, ValueError):
        answers.append("<truncated>")
    return DnsEvent(
        ts_ns=ts_ns,
        direction="response" if flags & 0x8000 else "query",
        name=name,
        qtype=QTYPES.get(qtype, str(qtype)),
        answers=answers,
        server=server,
        pid=pid,
    )
