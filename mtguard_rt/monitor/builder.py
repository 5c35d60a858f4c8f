"""Fold a stream of `RawEvent`s of one cgroup into a `BehaviorTree` for one call window.

Pure logic, no I/O except the optional `lookup` for a pid first seen mid-window, so tree
building replays recorded fixtures without root. Identity is (pid, start time): a fork of a
pid that is already known starts a new node. `live_spawned()` counts processes that began
during the window and have not exited: settling waits for it to reach zero.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Literal

import msgspec

from ..model import (
    BehaviorTree,
    DeclaredCall,
    DnsEvent,
    ExecEvent,
    FileEvent,
    FileOp,
    NetEvent,
    ProcessNode,
    UnixEvent,
)
from .decode import RawEvent, Recording
from .dns import decode_dns
from .kinds import BLIND_SPOTS, NP_AT_CONNECT, NP_AT_INGRESS, TRANSPORTS, Flag, Kind
from .paths import AT_FDCWD, FsState, text
from .procfs import SeedProcess
from .signals import refresh_targets, signal_event
from .stdio import StdioAssembler

O_ACCMODE, O_CREAT, O_TRUNC = 0o3, 0o100, 0o1000
AT_REMOVEDIR = 0x200
FAMILIES: dict[int, Literal["ipv4", "ipv6"]] = {2: "ipv4", 10: "ipv6"}
AF_UNIX = 1
PATH_OPS: dict[int, FileOp] = {
    Kind.UNLINK: "unlink",
    Kind.RMDIR: "rmdir",
    Kind.MKDIR: "mkdir",
    Kind.CHMOD: "chmod",
}

Lookup = Callable[[int], SeedProcess | None]


def open_flags(flags: int) -> list[str]:
    acc = flags & O_ACCMODE
    out = ["read"] if acc in (0, 2) else []
    if acc in (1, 2):
        out.append("write")
    if flags & O_CREAT:
        out.append("create")
    if flags & O_TRUNC:
        out.append("truncate")
    return out


def ip_text(family: int, addr: bytes) -> str:
    if family == 2:
        return str(ipaddress.IPv4Address(addr[:4]))
    return str(ipaddress.IPv6Address(addr[:16]))


# plain ints on the hot path: IntFlag arithmetic costs a microsecond per event
F_TRUNC1, F_TRUNC2, F_LEN_PARTIAL = int(Flag.TRUNC1), int(Flag.TRUNC2), int(Flag.LEN_PARTIAL)
F_HAS_CODE, F_BYFD = int(Flag.HAS_CODE), int(Flag.BYFD)
F_CONNECTED, K_NET_SENT = int(Flag.CONNECTED), int(Kind.NET_SENT)
F_APART, F_MMSG = int(Flag.APART), int(Flag.MMSG)
MMSG_ENTRY = 32  # a sendmmsg record's entry: raw sockaddr (24 bytes), u32 length, u32 0


def mmsg_entries(raw: bytes) -> list[tuple[int, bytes, int, int]]:
    """A sendmmsg record's named messages: (family, address bytes, port, length)."""
    out = []
    for off in range(0, len(raw) - MMSG_ENTRY + 1, MMSG_ENTRY):
        sa = raw[off : off + 24]
        family = int.from_bytes(sa[:2], "little")
        port = int.from_bytes(sa[2:4], "big")
        length = int.from_bytes(raw[off + 24 : off + 28], "little")
        if family == 2:
            out.append((family, sa[4:8], port, length))
        elif family == 10:
            out.append((family, sa[8:24], port, length))
    return out


K_NET_REFUSED = int(Kind.NET_REFUSED)
NP_OPS: dict[int, Literal["connect", "accept", "send"]] = {
    NP_AT_CONNECT: "connect",
    NP_AT_INGRESS: "accept",
}
K_OPEN, K_CLOSE = int(Kind.OPEN), int(Kind.CLOSE)
K_SYMLINK, K_LINK, K_SIGNAL = int(Kind.SYMLINK), int(Kind.LINK), int(Kind.SIGNAL)
K_STDIO = int(Kind.STDIO)
_flag_cache: dict[int, list[str]] = {}


def _open_flags_cached(flags: int) -> list[str]:
    out = _flag_cache.get(flags)
    if out is None:
        out = _flag_cache[flags] = open_flags(flags)
    return list(out)


class _Proc:
    __slots__ = ("alive", "fs", "node", "spawned")

    def __init__(self, node: ProcessNode, fs: FsState, spawned: bool) -> None:
        self.node = node
        self.fs = fs
        self.spawned = spawned
        self.alive = True


class TreeBuilder:
    def __init__(self, call: DeclaredCall, start_ns: int, lookup: Lookup | None = None) -> None:
        self.call = call
        self.start_ns = start_ns
        self._lookup = lookup
        self._procs: dict[int, _Proc] = {}
        self._order: list[_Proc] = []
        self._dns: list[DnsEvent] = []
        self._dns_servers: dict[tuple[int, int], str] = {}
        self.events = 0
        self.blind_spots: list[str] = []  # why the tree cannot be complete, beyond loss
        self.stdio = StdioAssembler()  # the server's stdio messages (integrity rules)
        self._connected: dict[tuple[int, int], NetEvent] = {}  # (pid, fd) -> its connect
        self._sends: dict[tuple[int, int, str, int], NetEvent] = {}  # (pid, fd, addr, port)
        self.last_net: NetEvent | None = None  # the event the last NET_SENT record updated
        # network policy: a refusal comes before the connect record it failed (pid, addr, port)
        self._refusals: dict[tuple[int, str, int], NetEvent] = {}
        self._refused: list[NetEvent] = []  # unattributed refusals (inbound packets)
        self._signalled = False  # a signal was recorded: its target's program is final at build
        # seeded processes whose parent is not seeded yet, by parent pid: a snapshot lists pids
        # in order, and a child's pid is below its parent's once pids wrapped (pid_max)
        self._orphans: dict[int, list[_Proc]] = {}

    # -- seeding ---------------------------------------------------------------
    def seed(self, sp: SeedProcess, learned: str = "seeded", spawned: bool = False) -> _Proc:
        node = ProcessNode(
            key=f"{sp.pid}@{sp.start_ns}",
            pid=sp.pid,
            ppid=sp.ppid,
            exe=sp.exe,
            argv=sp.argv,
            cwd=sp.cwd,
            uid=sp.uid,
            start_ns=sp.start_ns,
            learned="seeded" if learned == "seeded" else "observed",
        )
        parent = self._procs.get(sp.ppid)
        if parent is not None:
            node.parent = parent.node.key
        proc = _Proc(node, FsState(sp.cwd, sp.fds), spawned)
        self._procs[sp.pid] = proc
        self._order.append(proc)
        if learned == "seeded":  # one snapshot: parent and child are alive together
            if parent is None and sp.ppid > 0:
                self._orphans.setdefault(sp.ppid, []).append(proc)
            for child in self._orphans.pop(sp.pid, ()):
                child.node.parent = node.key
        return proc

    def adopt(self, other: _Proc, spawned: bool = True, by: str | None = None) -> _Proc:
        """Carry a live process of another window over (a worker a call left running): same
        identity and fd table, counted as spawned so its exit and descendants are followed
        (`spawned=False`: the server's own, carried into a between-call period as seeded).
        `started_by` stays the call that made it: `by` (the closed window's call) for a
        process spawned during that window, else the one it was marked with."""
        n = other.node
        node = ProcessNode(
            key=n.key,
            pid=n.pid,
            ppid=n.ppid,
            parent=n.parent,
            exe=n.exe,
            argv=list(n.argv),
            argv_truncated=n.argv_truncated,
            cwd=other.fs.cwd,
            uid=n.uid,
            start_ns=n.start_ns,
            learned="observed" if spawned else n.learned,
            started_by=n.started_by or (by if other.spawned else None),
        )
        proc = _Proc(node, other.fs.fork(), spawned=spawned)
        self._procs[n.pid] = proc
        self._order.append(proc)
        return proc

    def _proc(self, ev: RawEvent) -> _Proc:
        proc = self._procs.get(ev.pid)
        if proc is not None:
            return proc
        sp = self._lookup(ev.pid) if self._lookup else None
        if sp is None:
            sp = SeedProcess(ev.pid, 0, ev.ts_ns, "", [], None, ev.uid)
        # first seen mid-window (e.g. moved into the cgroup): new activity, it holds settling
        return self.seed(sp, learned="observed", spawned=True)

    # -- events ----------------------------------------------------------------
    def apply(self, ev: RawEvent) -> None:
        self.events += 1
        kind = ev.kind
        if kind == K_STDIO:  # bytes on the MCP wire, not a process effect
            self.stdio.feed(ev)
            return
        if kind == Kind.FORK:
            self._fork(ev)
            return
        if kind in (Kind.DNS_SEND, Kind.DNS_RECV):
            # attributed when the sender is a known process, else the tree's DNS branch
            self._dns_event(self._procs.get(ev.pid), ev)
            return
        if kind == K_NET_REFUSED:
            self._net_refused(ev)
            return
        proc = self._proc(ev)
        node = proc.node
        if kind == K_OPEN:
            path, ok = proc.fs.resolve(ev.a0, ev.s1, bool(ev.flags & F_TRUNC1))
            flags = _open_flags_cached(ev.a1)
            node.files.append(
                FileEvent(
                    ts_ns=ev.ts_ns,
                    op="open",
                    path=path,
                    resolved=ok,
                    flags=flags,
                    mode=ev.a2 if "create" in flags else None,
                    result=ev.ret,
                )
            )
            if ev.ret >= 0:
                proc.fs.opened(ev.ret, path, ok)
        elif kind == K_CLOSE:
            proc.fs.closed(ev.a0)
        elif kind == Kind.DUP:
            proc.fs.duped(ev.a0, ev.ret)
        elif kind == Kind.MEMFD:
            proc.fs.opened(ev.ret, "/memfd:" + text(ev.s1), not ev.flags & F_TRUNC1)
        elif kind == Kind.EXEC:
            path, _ok = proc.fs.resolve(ev.a0, ev.s1, bool(ev.flags & F_TRUNC1))
            argv = [text(a) for a in ev.s2.split(b"\0")] if ev.a2 else []
            node.execs.append(
                ExecEvent(
                    ts_ns=ev.ts_ns,
                    path=path,
                    argv=argv,
                    argv_truncated=bool(ev.flags & (F_TRUNC2 | F_LEN_PARTIAL)),
                    argv_len=ev.a1,
                )
            )
        elif kind == Kind.EXEC_RESULT:
            if node.execs and node.execs[-1].result == 0:
                last = node.execs[-1]
                if ev.ret < 0:
                    last.result = ev.ret
                else:
                    node.exe, node.argv, node.argv_truncated = (
                        last.path,
                        last.argv,
                        last.argv_truncated,
                    )
                    node.uid = ev.uid  # a set-uid program changes it at exec
            elif ev.ret == 0 and node.learned == "seeded" and self._lookup is not None:
                # an exec that straddled the window's start: its record came before the
                # window, the snapshot was read before it took effect; /proc says what runs now
                sp = self._lookup(ev.pid)
                if sp is not None and sp.start_ns == node.start_ns:
                    node.exe, node.argv, node.uid = sp.exe, sp.argv, ev.uid
        elif kind == Kind.BLIND:
            what = BLIND_SPOTS.get(ev.a0, str(ev.a0))
            self.blind_spots.append(
                f"process {node.pid} ({node.exe or '?'}) called {what}: "
                "operations through it are not traced"
            )
        elif kind == Kind.EXIT:
            proc.alive = False
            node.end_ns = ev.ts_ns
            if ev.flags & F_HAS_CODE:
                node.exit_code = ev.a0 & 0xFF
        elif kind in (Kind.UNLINK, Kind.RMDIR, Kind.MKDIR, Kind.CHMOD, Kind.CHDIR):
            self._path_op(proc, ev)
        elif kind == Kind.RENAME:
            src, ok1 = proc.fs.resolve(ev.a0, ev.s1, bool(ev.flags & F_TRUNC1))
            dst, ok2 = proc.fs.resolve(ev.a1, ev.s2, bool(ev.flags & F_TRUNC2))
            node.files.append(
                FileEvent(
                    ts_ns=ev.ts_ns,
                    op="rename",
                    path=src,
                    target=dst,
                    resolved=ok1 and ok2,
                    result=ev.ret,
                )
            )
        elif kind == K_SYMLINK or kind == K_LINK:
            self._link(proc, ev)
        elif kind == K_SIGNAL:
            self._signal(proc, ev)
        elif kind in (Kind.CONNECT, Kind.ACCEPT):
            family = FAMILIES.get(ev.a1)
            if family is None:
                if kind == Kind.CONNECT and ev.a1 == AF_UNIX:
                    node.unix.append(self._unix(proc, ev))
                return
            address = ip_text(ev.a1, ev.addr)
            if kind == Kind.CONNECT and ev.a2 == 53:
                self._dns_servers[(ev.pid, ev.a0)] = f"{address}:53"
            refusal = self._refusals.pop((ev.pid, address, ev.a2), None)
            if kind == Kind.CONNECT and refusal is not None and ev.ret < 0:
                refusal.result = ev.ret  # the connect the policy refused: one event
                refusal.transport = TRANSPORTS.get(ev.a3, refusal.transport)
                self._connected[(ev.pid, ev.a0)] = refusal
                return
            net = NetEvent(
                ts_ns=ev.ts_ns,
                op="connect" if kind == Kind.CONNECT else "accept",
                family=family,
                address=address,
                port=ev.a2,
                result=ev.ret,
                transport=TRANSPORTS.get(ev.a3, "unknown"),
            )
            node.net.append(net)
            if kind == Kind.CONNECT:
                self._connected[(ev.pid, ev.a0)] = net
        elif kind == K_NET_SENT:
            self._net_sent(node, ev)

    def _fork(self, ev: RawEvent) -> None:
        parent = self._proc(ev)
        child_pid = ev.a0
        existing = self._procs.get(child_pid)
        if (
            existing is not None
            and existing.node.learned == "seeded"
            and existing.alive
            and (ev.ts_ns >= self.start_ns)
        ):
            # forked after the window opened but caught by the seeding snapshot: it is new
            node = existing.node
            node.learned, node.start_ns, node.started_by = "observed", ev.ts_ns, None
            node.key, node.parent, node.ppid = f"{child_pid}@{ev.ts_ns}", parent.node.key, ev.pid
            existing.spawned = True
            return
        pn = parent.node
        node = ProcessNode(
            key=f"{child_pid}@{ev.ts_ns}",
            pid=child_pid,
            ppid=ev.pid,
            parent=pn.key,
            exe=pn.exe,
            argv=list(pn.argv),
            argv_truncated=pn.argv_truncated,
            cwd=parent.fs.cwd,
            uid=ev.uid,
            start_ns=ev.ts_ns,
        )
        proc = _Proc(node, parent.fs.fork(), spawned=True)
        self._procs[child_pid] = proc
        self._order.append(proc)

    def _path_op(self, proc: _Proc, ev: RawEvent) -> None:
        kind = ev.kind
        if ev.flags & F_BYFD:
            path, ok = proc.fs.fd_path(ev.a3)
        else:
            dirfd = AT_FDCWD if kind == Kind.CHDIR else ev.a0
            path, ok = proc.fs.resolve(dirfd, ev.s1, bool(ev.flags & F_TRUNC1))
        op: FileOp = PATH_OPS.get(kind, "chdir")
        if kind == Kind.UNLINK and ev.a1 & AT_REMOVEDIR:
            op = "rmdir"
        mode = ev.a2 if kind in (Kind.MKDIR, Kind.CHMOD) else None
        proc.node.files.append(
            FileEvent(ts_ns=ev.ts_ns, op=op, path=path, resolved=ok, mode=mode, result=ev.ret)
        )
        if kind == Kind.CHDIR and ev.ret == 0:
            proc.fs.cwd = path if ok else None
            proc.node.cwd = proc.fs.cwd

    def _link(self, proc: _Proc, ev: RawEvent) -> None:
        """symlink: `path` the new name, `target` its text as given; link: `target` the
        existing file, resolved like `path`."""
        path, ok = proc.fs.resolve(ev.a0, ev.s1, bool(ev.flags & F_TRUNC1))
        if ev.kind == K_SYMLINK:
            op: FileOp = "symlink"
            target = text(ev.s2)
        else:
            op = "link"
            target, ok2 = proc.fs.resolve(ev.a1, ev.s2, bool(ev.flags & F_TRUNC2))
            ok = ok and ok2
        proc.node.files.append(
            FileEvent(ts_ns=ev.ts_ns, op=op, path=path, target=target, resolved=ok, result=ev.ret)
        )

    def _signal(self, proc: _Proc, ev: RawEvent) -> None:
        self._signalled = True
        procs = self._procs
        proc.node.signals.append(
            signal_event(
                ev, proc.node, lambda pid: n.node if (n := procs.get(pid)) else None, self.start_ns
            )
        )

    def _unix(self, proc: _Proc, ev: RawEvent) -> UnixEvent:
        """An AF_UNIX connect: a path (relative ones against the cwd, as the kernel does),
        or an abstract name (leading NUL) as `@name`."""
        raw = ev.s1
        if raw[:1] == b"\0":
            name = raw[1:].rstrip(b"\0").replace(b"\0", b"@")
            return UnixEvent(ts_ns=ev.ts_ns, path="@" + text(name), abstract=True, result=ev.ret)
        path, _ok = proc.fs.resolve(AT_FDCWD, raw.split(b"\0", 1)[0])
        return UnixEvent(ts_ns=ev.ts_ns, path=path, result=ev.ret)

    def _net_sent(self, node: ProcessNode, ev: RawEvent) -> None:
        """Datagrams sent: counted on the socket's connect when the destination is its
        peer, else on a `send` event per (socket, destination); a sendmmsg record, each of
        its messages to its own destination (those past the record's: the last one's)."""
        self.last_net = None
        if ev.flags & F_MMSG:
            named = mmsg_entries(ev.s1)
            extra = max(0, ev.a3 - len(ev.s1) // MMSG_ENTRY)
            for i, (fam, raw, port, length) in enumerate(named):
                one = msgspec.structs.replace(
                    ev,
                    a1=fam,
                    a2=port,
                    addr=raw,
                    a3=1 + (extra if i == len(named) - 1 else 0),
                    flags=F_APART,
                    s1=length.to_bytes(8, "little"),
                )
                self._net_sent(node, one)
            return
        family = FAMILIES.get(ev.a1)
        if family is None:
            return
        address = ip_text(ev.a1, ev.addr)
        sent_bytes = int.from_bytes(ev.s1[:8], "little") if len(ev.s1) >= 8 else 0
        if ev.flags & F_CONNECTED:
            conn = self._connected.get((ev.pid, ev.a0))
            if conn is not None and conn.address == address and conn.port == ev.a2:
                conn.sent = max(conn.sent, ev.a3)
                conn.bytes_sent = max(conn.bytes_sent, sent_bytes)
                self.last_net = conn
                return
            if TRANSPORTS.get(ev.ret) == "tcp":
                return  # a stream connected before this window: its connect was the egress
        key = (ev.pid, ev.a0, address, ev.a2)
        send = self._sends.get(key)
        if send is None:
            send = self._sends[key] = NetEvent(
                ts_ns=ev.ts_ns,
                op="send",
                family=family,
                address=address,
                port=ev.a2,
                transport=TRANSPORTS.get(ev.ret, "unknown"),
            )
            node.net.append(send)
        if ev.flags & F_APART:  # each send reported apart (not the peer, Fast Open): summed
            send.sent += ev.a3
            send.bytes_sent += sent_bytes
        else:  # the socket's running totals for this destination
            send.sent = max(send.sent, ev.a3)
            send.bytes_sent = max(send.bytes_sent, sent_bytes)
        self.last_net = send

    def _net_refused(self, ev: RawEvent) -> None:
        """A network-policy refusal: on the connect it failed (which follows it), or on its
        own event (a datagram, a packet); inbound packets on the tree's `refused` list."""
        family = FAMILIES.get(ev.a1)
        if family is None:
            return
        address = ip_text(ev.a1, ev.addr)
        proc = self._procs.get(ev.pid) if ev.pid else None
        key = (ev.pid, address, ev.a2)
        known = self._refusals.get(key)
        if known is not None:
            known.refused = max(known.refused + 1, ev.ret)
            return
        net = NetEvent(
            ts_ns=ev.ts_ns,
            op=NP_OPS.get(ev.a0, "send"),  # inbound packets: "accept" (not egress)
            family=family,
            address=address,
            port=ev.a2,
            result=-1,  # EPERM (packets are dropped: their sender sees no error)
            transport=TRANSPORTS.get(ev.a3, "unknown"),
            refused=max(1, ev.ret),
        )
        if proc is None:
            self._refused.append(net)
            return
        proc.node.net.append(net)
        self._refusals[key] = net

    def _dns_event(self, proc: _Proc | None, ev: RawEvent) -> None:
        family = FAMILIES.get(ev.a1)
        if family is not None:
            server: str | None = f"{ip_text(ev.a1, ev.addr)}:{ev.a2}"
        else:
            server = self._dns_servers.get((ev.pid, ev.a0))
        dns = decode_dns(ev.s1, ev.ts_ns, server, ev.pid)
        if dns is None:
            dns = DnsEvent(
                ts_ns=ev.ts_ns,
                qtype="?",
                name="<malformed>",
                server=server,
                pid=ev.pid,
                direction="query" if ev.kind == Kind.DNS_SEND else "response",
            )
        if proc is None:
            self._dns.append(dns)
        else:
            proc.node.dns.append(dns)

    # -- settling and result -----------------------------------------------------
    def live_spawned(self) -> int:
        return sum(1 for p in self._order if p.spawned and p.alive)

    def build(
        self, end_ns: int, reasons: list[str], drops: dict[str, int], wall_offset_ns: int
    ) -> BehaviorTree:
        for proc in self._order:
            proc.node.still_running = proc.spawned and proc.alive
        if self._signalled:
            refresh_targets([p.node for p in self._order])
        lost = sorted(k for k in ("stdio", "window_overflow") if drops.get(k))
        stdio = self.stdio.capture(f"records lost ({', '.join(lost)})" if lost else None)
        reasons = [*reasons, *self.blind_spots]
        reasons += [f"stdio unverified: {why}" for why in stdio.unverified]
        return BehaviorTree(
            call=self.call,
            processes=[p.node for p in self._order],
            dns=self._dns,
            complete=not reasons,
            incomplete_reasons=reasons,
            drops=drops,
            window_start_ns=self.start_ns,
            window_end_ns=end_ns,
            wall_offset_ns=wall_offset_ns,
            stdio=stdio,
            refused=self._refused,
        )


def replay(rec: Recording, end_ns: int | None = None) -> BehaviorTree:
    """Rebuild a window's tree from its recording (no /proc lookups: fixtures are hermetic)."""
    builder = TreeBuilder(rec.call, rec.start_ns)
    for sp in rec.seeds:
        builder.seed(sp)
    for ev in rec.events:
        if ev.ts_ns >= rec.start_ns:
            builder.apply(ev)
    last = rec.events[-1].ts_ns if rec.events else rec.start_ns
    return builder.build(end_ns or last, [], {}, 0)
