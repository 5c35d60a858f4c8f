"""Real eBPF: every send is counted with its bytes, against the peer it went to.

A connected UDP socket's `write` exfil, `sendmmsg` of 5 messages to 5 destinations (each
to its own, with its own length), `sendfile` to a connected socket, and a TCP stream's
writes (bytes against the peer it connected to). All traffic goes to loopback listeners
this test owns; the test checks the datagrams really arrived, so the counts are the
kernel's, not the script's.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import anyio
import pytest
from monitor_harness import traced

from mtguard_rt.model import DeclaredCall
from mtguard_rt.monitor.builder import TreeBuilder
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import Flag, Kind
from mtguard_rt.monitor.procfs import SeedProcess

SCRIPT = """
import ctypes, os, socket, sys
w_port, tcp_port, f_port = (int(a) for a in sys.argv[1:4])
m_ports = [int(a) for a in sys.argv[4:9]]
path = sys.argv[9]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.connect(("127.0.0.1", w_port))
for chunk in (b"a" * 100, b"b" * 200, b"c" * 300):  # the write exfil: 600 bytes
    os.write(u.fileno(), chunk)
u.close()

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.c_void_p),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p),
                ("controllen", ctypes.c_size_t), ("flags", ctypes.c_int)]
class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint32)]
class sockaddr_in(ctypes.Structure):
    _fields_ = [("family", ctypes.c_uint16), ("port", ctypes.c_uint16),
                ("addr", ctypes.c_uint32), ("zero", ctypes.c_uint8 * 8)]
assert ctypes.sizeof(mmsghdr) == 64
libc = ctypes.CDLL(None, use_errno=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
msgs = (mmsghdr * 5)()
keep = []
for i, port in enumerate(m_ports):  # message i: 10 * (i + 1) bytes to m_ports[i]
    lo = int.from_bytes(bytes([127, 0, 0, 1]), "little")
    sa = sockaddr_in(socket.AF_INET, socket.htons(port), lo)
    buf = ctypes.create_string_buffer(b"m" * (10 * (i + 1)))
    iov = iovec(ctypes.cast(buf, ctypes.c_void_p), 10 * (i + 1))
    keep += [sa, buf, iov]
    msgs[i].hdr.name = ctypes.addressof(sa)
    msgs[i].hdr.namelen = ctypes.sizeof(sa)
    msgs[i].hdr.iov = ctypes.addressof(iov)
    msgs[i].hdr.iovlen = 1
n = libc.sendmmsg(s.fileno(), msgs, 5, 0)
assert n == 5, (n, ctypes.get_errno())
s.close()

with open(path, "wb") as f:
    f.write(b"s" * 700)
fu = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fu.connect(("127.0.0.1", f_port))
with open(path, "rb") as f:
    assert os.sendfile(fu.fileno(), f.fileno(), 0, 700) == 700
fu.close()

t = socket.create_connection(("127.0.0.1", tcp_port))
t.sendall(b"x" * 1000)
os.write(t.fileno(), b"y" * 24)
with open(path, "rb") as f:
    os.sendfile(t.fileno(), f.fileno(), 0, 700)
t.close()
"""


def _received(sock: socket.socket) -> list[int]:
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(len(sock.recv(4096)))
        except BlockingIOError:
            return out


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.anyio
async def test_every_send_is_counted_with_its_bytes(tmp_path: Path) -> None:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(7)]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        for s in (*socks, listener):
            s.bind(("127.0.0.1", 0))
        listener.listen(1)
        w_sock, f_sock, *m_socks = socks
        w_port, f_port = w_sock.getsockname()[1], f_sock.getsockname()[1]
        m_ports = [s.getsockname()[1] for s in m_socks]
        tcp_port = listener.getsockname()[1]
        args = [str(p) for p in (w_port, tcp_port, f_port, *m_ports)]
        cmd = [sys.executable, "-c", SCRIPT, *args, str(tmp_path / "payload")]
        with anyio.fail_after(60):
            tree = await traced(cmd)
        assert _received(w_sock) == [100, 200, 300]
        assert _received(f_sock) == [700]
        assert [_received(s) for s in m_socks] == [[10], [20], [30], [40], [50]]
    finally:
        for s in (*socks, listener):
            s.close()
    net = [n for p in tree.processes for n in p.net]
    by_port = {(n.op, n.port): n for n in net}

    written = by_port[("connect", w_port)]
    assert (written.transport, written.sent, written.bytes_sent) == ("udp", 3, 600)
    assert written.summary == f"connect udp 127.0.0.1:{w_port}, 3 datagrams, 600 bytes sent"

    mm = [by_port[("send", p)] for p in m_ports]  # each message to its own destination
    assert [(n.sent, n.bytes_sent) for n in mm] == [(1, 10 * (i + 1)) for i in range(5)]

    filed = by_port[("connect", f_port)]
    assert (filed.sent, filed.bytes_sent) == (1, 700)

    tcp = by_port[("connect", tcp_port)]
    assert tcp.transport == "tcp"
    assert tcp.bytes_sent == 1000 + 24 + 700  # sendall, write, sendfile: all against the peer
    assert ("send", tcp_port) not in by_port  # a stream's bytes go on its connect


def _raw(kind: Kind, ts: int, **kw: object) -> RawEvent:
    return RawEvent(ts_ns=ts, cgroup_id=7, kind=int(kind), pid=10, **kw)  # type: ignore[arg-type]


def _builder() -> TreeBuilder:
    b = TreeBuilder(DeclaredCall(call_id="c", server="s", tool="t"), 1000)
    b.seed(SeedProcess(10, 1, 500, "/usr/bin/python3", ["python3", "srv.py"], "/srv", 1000, {}))
    return b


def test_a_stream_connected_before_the_window_is_not_new_egress() -> None:
    """Its connect was judged in the call that made it: the writes of a kept-alive
    connection in a later window (or between calls) are not a new destination."""
    b = _builder()
    peer = bytes([203, 0, 113, 7]) + bytes(12)
    sent = (1000).to_bytes(8, "little")
    flags = int(Flag.CONNECTED)
    b.apply(
        _raw(Kind.NET_SENT, 1100, a0=5, a1=2, a2=443, a3=4, ret=1, flags=flags, addr=peer, s1=sent)
    )
    b.apply(
        _raw(Kind.NET_SENT, 1200, a0=6, a1=2, a2=53, a3=1, ret=2, flags=flags, addr=peer, s1=sent)
    )
    net = b.build(1300, [], {}, 0).processes[0].net
    assert [(n.op, n.transport, n.port, n.bytes_sent) for n in net] == [("send", "udp", 53, 1000)]


def test_a_sendmmsg_record_counts_each_message_to_its_destination() -> None:
    def entry(ip: bytes, port: int, length: int) -> bytes:
        sa = (2).to_bytes(2, "little") + port.to_bytes(2, "big") + ip + bytes(16)
        return sa + length.to_bytes(4, "little") + bytes(4)

    a, c = bytes([198, 51, 100, 1]), bytes([198, 51, 100, 2])
    record = entry(a, 53, 40) + bytes(32) + entry(c, 9, 7)  # the middle one had no name
    b = _builder()
    b.apply(_raw(Kind.NET_SENT, 1100, a0=5, a3=5, ret=2, flags=int(Flag.MMSG), s1=record))
    net = b.build(1300, [], {}, 0).processes[0].net
    # 5 sent, 3 read: the 2 unread count against the last named one's destination
    got = [(n.address, n.port, n.sent, n.bytes_sent) for n in net]
    assert got == [("198.51.100.1", 53, 1, 40), ("198.51.100.2", 9, 3, 7)]
