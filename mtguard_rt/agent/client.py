"""`RemoteProgram`: the agent's program seen from a guard, an `EventSource` for `Monitor`.

One unix-socket connection per guard, used from the event loop thread only. Requests are
synchronous round trips bounded by RPC_TIMEOUT_S; the events that arrive before a reply are
delivered to the sink after it (so a sink may itself make a request). `consume()` is a
`sync`: the agent drains the kernel's ring first, so a settling window sees every record
of its cgroup up to now, as with the in-process program; `lost(cgroup)` is that cgroup's
records lost (in the kernel, or shed by the agent's bounded queue), as `BpfProgram.lost`
counts them, so `lost-events` judges a window the same through the agent. The agent gone:
`MonitorLost`, and the guard fails closed.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MonitorLost
from .protocol import (
    TAG_EVENT,
    TAG_REPLY,
    TAG_REPORT,
    TAG_REQUEST,
    CallReport,
    FrameBuffer,
    Request,
    encode,
    event_decoder,
    reply_decoder,
)

CONNECT_TIMEOUT_S = 1.0  # a live agent accepts at once; longer means none (or a hung one)
RPC_TIMEOUT_S = 10.0  # a sync under a full ring buffer on a loaded host, with margin


class AgentUnavailable(Exception):
    """No agent answers at the socket (none, stale, refused): use the in-process monitor."""


class RemoteProgram:
    def __init__(self, sock: socket.socket, path: Path) -> None:
        self._sock = sock
        self.path = path
        self.ring_fd: int = sock.fileno()
        self.decoder = event_decoder
        self._frames = FrameBuffer()
        self._sink: Callable[[bytes], None] | None = None
        self._pending: list[bytes] = []  # events read while waiting for a reply
        self.gone = False  # the agent went away: it gave our cgroups back itself
        hello = self.call(Request(op="hello"))
        self.agent_pid = int(hello["pid"])
        self.load_s = float(hello["load_ms"]) / 1000
        self.counts_lost = bool(hello.get("lost"))  # an older agent: per-cgroup losses unknown

    # -- the wire --------------------------------------------------------------------------
    def _recv(self, timeout: float) -> None:
        if not select.select([self._sock], [], [], max(0.0, timeout))[0]:
            return
        try:
            data = self._sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            raise MonitorLost(f"the agent connection failed: {exc}") from exc
        if not data:
            raise MonitorLost(f"the agent at {self.path} closed the connection")
        self._frames.feed(data)

    def call(self, req: Request) -> Any:
        try:
            return self._call(req)
        except MonitorLost:
            self.gone = True
            raise

    def _release(self, req: Request) -> None:
        """A give-back request: moot once the agent is gone (it released them on EOF)."""
        if not self.gone:
            self.call(req)

    def _call(self, req: Request) -> Any:
        try:
            self._sock.sendall(encode(TAG_REQUEST, req))
        except OSError as exc:
            raise MonitorLost(f"the agent at {self.path} is gone: {exc}") from exc
        deadline = time.monotonic() + RPC_TIMEOUT_S
        while True:
            reply = None
            for tag, payload in self._frames.frames():
                if tag == TAG_EVENT:  # before the reply, or after it: all delivered now
                    self._pending.append(payload)
                elif tag == TAG_REPLY and reply is None:  # one request in flight: one reply
                    reply = reply_decoder.decode(payload)
                else:
                    raise MonitorLost(f"the agent sent an unexpected frame {tag!r}")
            if reply is not None:
                self._deliver()
                if not reply.ok:
                    raise MonitorLost(f"the agent refused {req.op}: {reply.error}")
                return reply.value
            left = deadline - time.monotonic()
            if left <= 0:
                raise MonitorLost(f"the agent did not answer {req.op} in {RPC_TIMEOUT_S:g} s")
            self._recv(left)

    def _deliver(self) -> None:
        pending, self._pending = self._pending, []
        sink = self._sink
        if sink is not None:
            for payload in pending:
                sink(payload)

    # -- EventSource -----------------------------------------------------------------------
    def add_cgroup(self, cgroup_id: int, eager: bool = False) -> None:
        self.call(Request(op="add_cgroup", cgroup_id=cgroup_id, eager=eager))

    def remove_cgroup(self, cgroup_id: int) -> None:
        self._release(Request(op="remove_cgroup", cgroup_id=cgroup_id))

    def protect(self, cgroup_id: int, paths: dict[str, int]) -> list[str]:
        return [str(p) for p in self.call(Request(op="protect", cgroup_id=cgroup_id, paths=paths))]

    def actions(self, cgroup_id: int, path: str) -> int:
        return int(self.call(Request(op="actions", cgroup_id=cgroup_id, path=path)))

    def unprotect(self, cgroup_id: int) -> None:
        self._release(Request(op="unprotect", cgroup_id=cgroup_id))

    def wire_add(self, cgroup_id: int, fds: dict[tuple[int, int], int]) -> None:
        flat = [(pid, fd, stream) for (pid, fd), stream in fds.items()]
        self.call(Request(op="wire_add", cgroup_id=cgroup_id, fds=flat))

    def wire_forget(self, cgroup_id: int) -> None:
        self._release(Request(op="wire_forget", cgroup_id=cgroup_id))

    def drops(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.call(Request(op="drops")).items()}

    def lost(self, cgroup_id: int) -> dict[str, int] | None:
        """One cgroup's records lost since it was watched, per kind (`BpfProgram.lost`),
        the agent's own shedding included; None from an agent that does not count them."""
        if not self.counts_lost:
            return None
        got = self.call(Request(op="lost", cgroup_id=cgroup_id))
        return {str(k): int(v) for k, v in got.items()}

    def has_sink(self) -> bool:
        return self._sink is not None

    def set_sink(self, on_record: Callable[[bytes], None] | None) -> None:
        self._sink = on_record

    def consume(self, limit: int = 0) -> bool:
        self.call(Request(op="sync"))
        return False

    def report(self, rep: CallReport) -> None:
        """One call's figures for the agent's metrics: sent, never answered. A lost agent
        is noticed by the next request, which fails the guard closed."""
        if not self.gone:
            try:
                self._sock.sendall(encode(TAG_REPORT, rep))
            except OSError:
                pass

    def status(self) -> dict[str, Any]:
        value: dict[str, Any] = self.call(Request(op="status"))
        return value

    def close(self) -> None:
        self._sock.close()


def connect_agent(path: Path) -> RemoteProgram:
    """A connection to the agent at `path`; `AgentUnavailable` when none answers."""
    if not path.exists():
        raise AgentUnavailable(f"no agent at {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(str(path))
        sock.settimeout(RPC_TIMEOUT_S)  # bounds a send; receives wait in select() first
        return RemoteProgram(sock, path)
    except (OSError, MonitorLost) as exc:
        sock.close()
        raise AgentUnavailable(f"the agent at {path} does not answer: {exc}") from exc


def open_agent_program(*, spawn: bool = False) -> tuple[RemoteProgram | None, str]:
    """The agent's program if one answers (with `spawn` and MTGUARD_AGENT=auto: one
    started here if none does, agent/spawn.py), and the mode line for the log and `doctor`.
    May block for an agent's start-up: call it from a worker thread in async code."""
    from .protocol import agent_socket_path

    path = agent_socket_path()
    if not agent_wanted():
        return None, "monitor: in-process (MTGUARD_AGENT=off)"
    try:
        program = connect_agent(path)
    except AgentUnavailable as exc:
        if not (spawn and agent_on_demand()):
            return None, f"monitor: in-process ({exc})"
        from .spawn import start_agent

        try:
            program, how = start_agent(path)
        except (AgentUnavailable, OSError) as exc:
            return None, f"monitor: in-process ({exc})"
        return program, f"monitor: agent (pid {program.agent_pid}, {how}) at {path}"
    return program, f"monitor: agent (pid {program.agent_pid}) at {path}"


def agent_wanted() -> bool:
    """MTGUARD_AGENT=off (or 0, no) keeps every guard on its own in-process monitor."""
    return os.environ.get("MTGUARD_AGENT", "").lower() not in ("off", "0", "no")


def agent_on_demand() -> bool:
    """MTGUARD_AGENT=auto: a guard that finds no agent starts one (off by default)."""
    return os.environ.get("MTGUARD_AGENT", "").lower() == "auto"
