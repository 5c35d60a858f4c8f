"""`serve_agent()`: one BPF program, one ring-buffer reader, many guards over a unix socket.

The socket is root-only (its folder 0700, itself 0600) and every peer's credentials are
checked (SO_PEERCRED: uid 0 or ours). A connection owns the cgroups it asked to watch;
each record goes to the owner of its cgroup, none to anyone else. A connection that ends,
however it ends (a proxy SIGKILLed), gives its cgroups back: out of the kernel filter, its
protected paths and wire fds forgotten; the others are served on; once its process is dead,
the sandboxes it left are removed, as at start-up those of any dead guard (adopt.py). Each
connection's queue of unsent bytes is bounded: past it, events are counted lost (reported as
drops, and per cgroup and kind beside the kernel's own per-cgroup losses: `lost`, so a
window's `lost-events` sees what the agent shed as it sees what the kernel did). Guards
report each audited call (`M` frames); with a metrics address the agent serves them, and its
own figures, to Prometheus (agent/metrics.py).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
from anyio.abc import SocketAttribute

from ..errors import GuardError
from ..monitor.kinds import O_ANY_WRITE, Kind
from ..monitor.loader import BpfProgram, load_program
from .adopt import PeerExit, remove_orphans
from .metrics import AgentMetrics, serve_metrics
from .protocol import (
    TAG_EVENT,
    TAG_REPLY,
    TAG_REPORT,
    TAG_REQUEST,
    FrameBuffer,
    Reply,
    Request,
    encode,
    frame,
    report_decoder,
    request_decoder,
)
from .sessions import SessionStore

CONSUME_BATCH = 2048  # records per event-loop turn, as in the in-process monitor
MAX_BACKLOG = 64 << 20  # unsent bytes per connection (~200k events); more are counted lost
SEND_CHUNK = 1 << 20
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_log = logging.getLogger(__name__)
_LOST_NAMES = {int(k): k.name.lower() for k in Kind}  # as `BpfProgram.lost` names them
K_OPEN = int(Kind.OPEN)


def lost_name(kind: int, flags: int) -> str:
    """A lost record's kind as the kernel's per-cgroup count names it (monitor.bpf.c
    `count_lost`: a writing open, `flags` its open flags, apart)."""
    if kind == K_OPEN and flags & O_ANY_WRITE:
        return "open_write"
    return _LOST_NAMES.get(kind, f"kind_{kind}")


class Connection:
    def __init__(self, agent: Agent, stream: anyio.abc.SocketStream, pid: int, uid: int) -> None:
        self.agent = agent
        self.stream = stream
        self.pid = pid
        self.uid = uid
        self.cgroups: set[int] = set()
        self.out = bytearray()
        self.lost = 0
        self.lost_by_cgroup: dict[int, dict[str, int]] = {}  # cgroup -> kind -> events shed
        self.events = 0
        self.ready = anyio.Event()

    def push_event(self, payload: bytes, cgroup_id: int = 0, kind: str = "") -> None:
        if len(self.out) > MAX_BACKLOG:
            self.lost += 1
            counts = self.lost_by_cgroup.setdefault(cgroup_id, {})
            counts[kind] = counts.get(kind, 0) + 1
            return
        self.out += frame(TAG_EVENT, payload)
        self.events += 1

    def push_reply(self, reply: Reply) -> None:
        self.out += encode(TAG_REPLY, reply)
        self.ready.set()

    async def write(self) -> None:
        while True:
            await self.ready.wait()
            self.ready = anyio.Event()
            while self.out:
                chunk = bytes(self.out[:SEND_CHUNK])
                del self.out[:SEND_CHUNK]
                await self.stream.send(chunk)


class Agent:
    def __init__(self, program: BpfProgram, path: Path) -> None:
        self.program = program
        self.path = path
        self.started = time.time()
        self.owner: dict[int, Connection] = {}  # cgroup id -> the connection watching it
        self.connections: set[Connection] = set()
        self.events_total = 0
        self.events_unrouted = 0
        self.connections_total = 0
        self.metrics = AgentMetrics()
        self.metrics_port: int | None = None
        self.sessions = SessionStore()  # the guards' sessions (sessions.py), by uid and name
        self._dirty: set[Connection] = set()
        self._encode: Callable[[Any], bytes] = msgspec.msgpack.Encoder().encode
        self.stop = anyio.Event()
        self.sweeps: anyio.abc.TaskGroup | None = None  # removals of dead guards' sandboxes
        self.orphans_removed = 0

    async def sweep(self, peer: PeerExit) -> None:
        self.orphans_removed += len(await peer.sweep())

    # -- the one reader ------------------------------------------------------------------
    def _on_record(self, raw: bytes) -> None:
        ev = self.program.decoder.decode(raw)
        self.events_total += 1
        conn = self.owner.get(ev.cgroup_id)
        if conn is None:
            self.events_unrouted += 1
            return
        conn.push_event(self._encode(ev), ev.cgroup_id, lost_name(ev.kind, ev.a1))
        self._dirty.add(conn)

    def _flush(self) -> None:
        for conn in self._dirty:
            conn.ready.set()
        self._dirty.clear()

    async def read(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        while True:
            await anyio.wait_readable(self.program.ring_fd)
            self.program.consume(CONSUME_BATCH)
            self._flush()

    # -- requests ------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "socket": str(self.path),
            "uptime_s": round(time.time() - self.started, 1),
            "programs": 1,
            "load_ms": round(self.program.load_s * 1000, 1),
            "ring_pages": self.program.ring_pages,
            "connections": len(self.connections),
            "connections_total": self.connections_total,
            "watched_cgroups": len(self.owner),
            "events_total": self.events_total,
            "events_unrouted": self.events_unrouted,
            "drops": self.program.drops(),
            "lost_by_connection": sum(c.lost for c in self.connections),
            "metrics_port": self.metrics_port,
            "orphans_removed": self.orphans_removed,
            "sessions": len(self.sessions),
            "peers": [
                {"pid": c.pid, "uid": c.uid, "cgroups": sorted(c.cgroups), "events": c.events}
                for c in sorted(self.connections, key=lambda c: c.pid)
            ],
        }

    def _owned(self, conn: Connection, cgroup_id: int) -> None:
        if self.owner.get(cgroup_id) is not conn:
            raise GuardError(f"cgroup {cgroup_id} is not watched by this connection")

    def handle(self, conn: Connection, req: Request) -> Any:
        p, op, cg = self.program, req.op, req.cgroup_id
        if op == "hello":
            # `lost`: this agent answers the per-cgroup `lost` request (older ones do not)
            return {"pid": os.getpid(), "load_ms": round(p.load_s * 1000, 1), "lost": True}
        if op == "status":  # with the asker's own sessions (`mtguard doctor` lists them)
            return {**self.status(), "session_list": self.sessions.summary(conn.uid)}
        if op == "stop":
            self.stop.set()
            return None
        if op == "sync":  # every record in the ring now, to its owner, before this reply
            p.consume()
            self._flush()
            return None
        if op == "drops":
            drops = dict(p.drops())
            if conn.lost:
                drops["agent_backlog"] = conn.lost
            return drops
        if op == "add_cgroup":
            other = self.owner.get(cg)
            if other is not None and other is not conn:
                raise GuardError(f"cgroup {cg} is already watched by another guard")
            self.owner[cg] = conn
            conn.cgroups.add(cg)
            p.add_cgroup(cg, eager=req.eager)
            return None
        if op.startswith("session_"):  # only sessions of the peer's own uid (sessions.py)
            return self.sessions.handle(conn, conn.uid, conn.pid, op, req.session, req.value)
        if op in ("remove_cgroup", "unprotect", "wire_forget") and self.owner.get(cg) is not conn:
            return None  # given back already (remove_cgroup forgets all three at once)
        self._owned(conn, cg)
        if op == "remove_cgroup":
            self._release(conn, cg)
            return None
        if op == "lost":  # the kernel's losses of this cgroup, plus what the agent shed
            counts = dict(p.lost(cg))
            for kind, n in conn.lost_by_cgroup.get(cg, {}).items():
                counts[kind] = counts.get(kind, 0) + n
            return counts
        if op == "protect":
            return p.protect(cg, req.paths)
        if op == "actions":
            return p.actions(cg, req.path)
        if op == "unprotect":
            p.unprotect(cg)
            return None
        if op == "wire_add":
            p.wire_add(cg, {(pid, fd): stream for pid, fd, stream in req.fds})
            return None
        if op == "wire_forget":
            p.wire_forget(cg)
            return None
        raise GuardError(f"unknown request {op!r}")

    def _release(self, conn: Connection, cgroup_id: int) -> None:
        conn.cgroups.discard(cgroup_id)
        conn.lost_by_cgroup.pop(cgroup_id, None)  # as the kernel's count: from 0 when re-added
        if self.owner.get(cgroup_id) is conn:
            del self.owner[cgroup_id]
            self.program.remove_cgroup(cgroup_id)
            self.program.unprotect(cgroup_id)
            self.program.wire_forget(cgroup_id)

    # -- connections ---------------------------------------------------------------------
    async def serve(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
            pid, uid, _gid = _CRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
            )
            if uid not in (0, os.getuid()):
                return  # not root, not us: closed without a word
            conn = Connection(self, stream, pid, uid)
            peer = PeerExit(pid)  # pinned now: at its exit, the sandboxes it left go
            self.connections.add(conn)
            self.connections_total += 1
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(conn.write)
                    await self._requests(conn)
                    tg.cancel_scope.cancel()
            except* (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the guard went away (a SIGKILL): its cgroups are given back below
            except* Exception as group:  # one connection's failure never ends the agent
                _log.warning("connection of pid %d dropped: %r", pid, group.exceptions)
            finally:
                self.connections.discard(conn)
                self.sessions.leave(conn)  # its members stay, as history for the others
                died_watching = bool(conn.cgroups)  # a guard's own exit gives them back first
                for cg in list(conn.cgroups):
                    self._release(conn, cg)
                if self.sweeps is not None and died_watching:
                    self.sweeps.start_soon(self.sweep, peer)
                else:
                    peer.close()

    async def _requests(self, conn: Connection) -> None:
        buf = FrameBuffer()
        while True:
            try:
                data = await conn.stream.receive()
            except anyio.EndOfStream:
                return
            buf.feed(data)
            try:
                frames = buf.frames()
            except ValueError:
                return  # not our protocol: hang up
            for tag, payload in frames:
                if tag == TAG_REPORT:
                    try:
                        self.metrics.observe(report_decoder.decode(payload))
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        self.metrics.reports_bad += 1
                    continue
                if tag != TAG_REQUEST:
                    return
                try:
                    reply = Reply(value=self.handle(conn, request_decoder.decode(payload)))
                except Exception as exc:  # one bad request fails, not the agent
                    reply = Reply(ok=False, error=str(exc) or type(exc).__name__)
                conn.push_reply(reply)


def _listen_path(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # a stale socket of an agent that died
        else:
            raise GuardError(f"an agent already answers at {path}")
        finally:
            probe.close()


async def serve_agent(
    path: Path,
    ring_pages: int = 4096,
    *,
    metrics: tuple[str, int] | None = None,
    task_status: anyio.abc.TaskStatus[Agent] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Load the program, listen at `path` (and serve Prometheus metrics on `metrics`,
    host and port, when given) until a `stop` request or cancel."""
    _listen_path(path)
    removed: list[str] = []
    async with anyio.create_task_group() as early:  # what dead guards left, while compiling

        async def sweep() -> None:
            removed.extend(await remove_orphans())

        early.start_soon(sweep)
        program = await anyio.to_thread.run_sync(load_program, ring_pages)
    if program.has_sink():
        raise GuardError("a monitor is already open in this process")
    agent = Agent(program, path)
    agent.orphans_removed = len(removed)
    program.set_sink(agent._on_record)
    old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
    try:
        listener = await anyio.create_unix_listener(path, mode=0o600)
    finally:
        os.umask(old)
    try:
        async with listener, anyio.create_task_group() as tg:
            await tg.start(agent.read)
            agent.sweeps = tg
            tg.start_soon(listener.serve, agent.serve, tg)
            if metrics is not None:
                render = lambda: agent.metrics.render(agent.status())  # noqa: E731
                agent.metrics_port = await tg.start(serve_metrics, metrics, render)
            task_status.started(agent)
            await agent.stop.wait()
            tg.cancel_scope.cancel()
    finally:
        program.set_sink(None)
        for cg in list(agent.owner):
            program.remove_cgroup(cg)
        path.unlink(missing_ok=True)  # noqa: ASYNC240 - one unlink of a socket at exit
