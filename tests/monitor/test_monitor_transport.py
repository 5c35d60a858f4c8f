"""Real eBPF: each connect says its transport, and datagrams are counted where they leave.

A UDP `connect()` sends no packet (browsers probe IPv6 reachability that way), so the tree
must tell it from a UDP socket that did send, and from a TCP connect. All traffic goes to
loopback listeners this test owns; the assertions check the tree and that the datagrams
really arrived, so the counts are the kernel's, not the script's.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import anyio
import pytest
from monitor_harness import CALL, gated_cgroup, traced

from mtguard_rt.audit import CallContext, load_policy
from mtguard_rt.audit.rules_net import unexpected_network
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import DeclaredCall, NetEvent, ProcessNode
from mtguard_rt.monitor import MonitorConfig, open_monitor
from mtguard_rt.monitor.window import BuiltEvent, Window

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]

SCRIPT = """
import os, socket, sys
udp_port, tcp_port, sink_port = (int(a) for a in sys.argv[1:4])
probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
probe.connect(("::1", 443))  # the reachability probe: connect, no datagram
probe.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.connect(("127.0.0.1", udp_port))
u.send(b"1")  # sendto without an address
os.write(u.fileno(), b"2")  # write on the connected socket
u.sendmsg([b"3"])
u.close()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"4", ("127.0.0.1", sink_port))  # unconnected: the destination is per datagram
s.sendto(b"5", ("127.0.0.1", sink_port))
s.close()
t = socket.create_connection(("127.0.0.1", tcp_port))
t.sendall(b"tcp")
t.close()
"""


def _received(sock: socket.socket) -> list[bytes]:
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(sock.recv(64))
        except BlockingIOError:
            return out


async def test_udp_probe_datagrams_and_tcp_are_told_apart() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener,
    ):
        for s in (udp, sink, listener):
            s.bind(("127.0.0.1", 0))
        listener.listen(1)
        ports = [s.getsockname()[1] for s in (udp, sink, listener)]
        cmd = [sys.executable, "-c", SCRIPT, str(ports[0]), str(ports[2]), str(ports[1])]
        with anyio.fail_after(60):
            tree = await traced(cmd)
        assert _received(udp) == [b"1", b"2", b"3"]
        assert _received(sink) == [b"4", b"5"]
    net = [n for p in tree.processes for n in p.net]
    by_port = {(n.op, n.port): n for n in net}

    probe = by_port[("connect", 443)]
    assert (probe.transport, probe.family, probe.address, probe.sent) == ("udp", "ipv6", "::1", 0)
    assert not probe.egress
    assert probe.summary == "connect udp [::1]:443, no datagram sent"

    connected = by_port[("connect", ports[0])]
    assert (connected.transport, connected.sent, connected.egress) == ("udp", 3, True)

    sent = by_port[("send", ports[1])]
    assert (sent.transport, sent.address, sent.sent, sent.egress) == ("udp", "127.0.0.1", 2, True)

    tcp = by_port[("connect", ports[2])]
    assert (tcp.transport, tcp.result, tcp.egress, tcp.bytes_sent) == ("tcp", 0, True, 3)
    assert ("send", ports[2]) not in by_port  # a stream's bytes go on its connect

    # the rule on the real tree: everything but the probe is egress (loopback not allowed)
    policy = load_policy()  # balanced: loopback is not allowed, port 53 only
    call = DeclaredCall(call_id="t", server="s", tool="fetch", arguments={})
    ctx = CallContext(call=call)
    [v] = unexpected_network(ctx, TreeView.build(tree, policy, {}), {}, policy)
    text = "\n".join(v.evidence)
    assert "::1:443" not in text
    assert f"sent 3 udp datagrams to 127.0.0.1:{ports[0]} (connected)" in text
    assert f"sent 2 udp datagrams to 127.0.0.1:{ports[1]}" in text
    assert f"connected to 127.0.0.1:{ports[2]} (tcp)" in text


FORK_SCRIPT = """
import os, socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.connect(("127.0.0.1", port))
fd = u.fileno()
pid = os.fork()
if pid == 0:  # the child sends on the socket its parent connected
    u.send(b"a")
    os.write(fd, b"b")
    u.close()
    f = os.open(path, os.O_WRONLY | os.O_CREAT)  # takes the same number
    assert f == fd, (f, fd)
    os.write(f, b"a file, not a datagram")
    os._exit(0)
os.waitpid(pid, 0)
u.close()
"""


async def test_a_forked_child_sending_on_an_inherited_socket_is_seen(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        port = udp.getsockname()[1]
        cmd = [sys.executable, "-c", FORK_SCRIPT, str(port), str(tmp_path / "f")]
        with anyio.fail_after(60):
            tree = await traced(cmd)
        assert _received(udp) == [b"a", b"b"]
    parent = next(p for p in tree.processes if any(n.op == "connect" for n in p.net))
    child = next(p for p in tree.processes if p.parent == parent.key)
    (conn,) = parent.net
    assert (conn.transport, conn.sent, conn.egress) == ("udp", 0, False)  # the parent sent none
    (sent,) = child.net  # the file write on the reused number is not a datagram
    assert (sent.op, sent.transport, sent.port, sent.sent) == ("send", "udp", port, 2)
    assert sent.egress


def test_old_trees_without_transport_are_egress() -> None:
    ev = NetEvent(ts_ns=1, op="connect", family="ipv4", address="127.0.0.1", port=1)
    assert ev.transport == "unknown" and ev.egress


ONLINE_SCRIPT = """
import socket, sys
port = int(sys.argv[1])
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect(("127.0.0.1", port))
print("connected", flush=True)
sys.stdin.readline()  # the test checks the online rule saw the connect and did not fire
probe.send(b"x")
probe.close()
"""


async def test_online_hook_sees_the_connect_then_the_first_datagram() -> None:
    """The window hands each NET_SENT to the online hook as the connect it counted on: the
    connect alone is not egress, the same event after one datagram is. (The online rule
    itself never fires on loopback; tests/audit/test_online.py covers it on other
    addresses with these very event shapes.)"""
    seen: list[tuple[str, str, int, bool]] = []
    first = anyio.Event()

    def hook(_win: Window, proc: ProcessNode, ev: BuiltEvent) -> None:
        if isinstance(ev, NetEvent):
            seen.append((ev.op, ev.transport, ev.sent, ev.egress))
            first.set()

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        port = udp.getsockname()[1]
        cmd = [sys.executable, "-c", ONLINE_SCRIPT, str(port)]
        async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon, gated_cgroup() as cg:
            async with cg.run(cmd) as proc, mon.watch(cg.id, str(cg.path), eager=True) as watch:
                async with watch.window(CALL, on_event=hook) as window:
                    await cg.release(proc)
                    assert await cg.line() == b"connected"
                    with anyio.fail_after(10):
                        await first.wait()  # the connect reaches the hook at once (eager)
                    assert seen == [("connect", "udp", 0, False)]
                    assert proc.stdin is not None
                    await proc.stdin.send(b"go\n")
                    with anyio.fail_after(10):
                        await proc.wait()
                    window.response_arrived()
        assert _received(udp) == [b"x"]
    assert seen[1:] == [("connect", "udp", 1, True)]
    (node,) = [p for p in window.tree.processes if p.net]
    assert node.net[0].sent == 1 and len(node.net) == 1
