"""`AgentSession`: a guard's servers as members of one session in the agent.

On a connection of its own (never the monitor's), each server of the guard publishes its
listing when it changes and each finished call before its result goes back to the host, so
the next call, to another server behind another proxy, finds it. Before each audit the other
members' state is read (only those changed since the last read) and rebuilt into `Peer`s:
the same `SessionLog` and `UntrustedLog` a server of the same guard has, so the rules see
one session through `route` as they do inside one library guard. Every exchange is bounded
(`EXCHANGE_TIMEOUT_S`): a slow or gone agent means the call is judged on the local view,
`PeerView.note` says why (the record carries it, the log says it once), and a reconnect is
tried at most every `RETRY_S` (as a new member: what the old one published is history); a
connection found closed (an agent restarted since) is replaced at once, within the exchange.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from ..audit.provenance import UntrustedLog
from ..audit.session import MAX_RESULT_CHARS, SessionCall, SessionLog
from .protocol import TAG_REPLY, TAG_REQUEST, FrameBuffer, Request, encode, reply_decoder
from .sessions import MAX_ARGS_BYTES, MemberState, SharedCall, clip_result, clip_tools

EXCHANGE_TIMEOUT_S = 2.0  # one round trip to a live agent is well under 10 ms, even loaded
CONNECT_TIMEOUT_S = 1.0
RETRY_S = 5.0  # after a failure, the next attempt to reach the agent: not on every call
_log = logging.getLogger(__name__)
_enc = msgspec.msgpack.Encoder(enc_hook=repr)  # an argument msgpack cannot hold is named


# what a connection the agent closed says (on send or on receive)
_CLOSED = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


class SessionUnavailable(Exception):
    """The agent did not take part in this exchange (none, gone, slow, refused)."""


class _NotYet(SessionUnavailable):
    """Within `RETRY_S` of the last failure: no attempt made (nor the retry put off)."""


@dataclass
class Peer:
    """Another proxy's server as the rules reach it by `route`: what a `Supervisor` holds."""

    name: str
    tools: dict[str, Any]
    session: SessionLog
    untrusted: UntrustedLog


def build_peer(
    name: str, state: MemberState, tool_names: list[str], history: bool | None = None
) -> Peer:
    """A member's published state replayed into the guard's own data model. A member that
    left, or another start of a server already named (`history`), is history: its calls and
    what they answered, not a second registry of the same tools (a host that restarts or
    runs a server twice does not shadow itself)."""
    listing = [] if (state.left if history is None else history) else state.tools
    untrusted = UntrustedLog(name)
    untrusted.listing(listing)
    log = SessionLog(name)
    for c in state.calls:
        shown = None if c.result is None else c.result[:MAX_RESULT_CHARS]
        log.calls.append(SessionCall(c.seq, name, c.tool, dict(c.arguments), c.decision, shown))
        if c.result is not None:  # what the agent read, as a result with one text item
            result = {"content": [{"type": "text", "text": c.result}]}
            untrusted.result(c.tool, result, tool_names, c.arguments)
    tools = {str(t["name"]): t for t in listing}
    return Peer(name, tools, log, untrusted)


@dataclass(frozen=True)
class PeerView:
    """The other members of the session for one call; `note` set when it is local only."""

    peers: dict[str, Peer] = field(default_factory=dict)
    note: str = ""

    def merged(
        self, local: dict[str, list[str]], route: Callable[[str], Any] | None
    ) -> tuple[dict[str, list[str]], Callable[[str], Any] | None]:
        """`tools_by_server` and a `route` over the local servers and the peers (a local
        name wins). The route is for views only: a peer is never a dispatch target."""
        if not self.peers:
            return local, route
        servers = {n: list(p.tools) for n, p in self.peers.items()} | local

        def look(name: str) -> Any:
            found = route(name) if route is not None else None
            return found if found is not None else self.peers.get(name)

        return servers, look


class AgentSession:
    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.note = ""  # why the last exchange failed ("" when it worked)
        self._stream: anyio.abc.SocketStream | None = None
        self._frames = FrameBuffer()
        self._lock = anyio.Lock()
        self._torn = False  # an exchange was cancelled halfway: its reply may still come
        self._retry_at = 0.0
        self._members: dict[str, int] = {}  # server -> member id on this connection
        self._listings: dict[str, list[dict[str, Any]]] = {}
        self._unsent: set[str] = set()  # servers whose listing the agent has not got
        self._wake = anyio.Event()
        self._states: dict[int, MemberState] = {}
        self._built: dict[int, tuple[int, tuple[str, ...], Peer]] = {}

    # -- the wire ------------------------------------------------------------------------
    async def _exchange(self, stream: anyio.abc.SocketStream, req: Request) -> Any:
        await stream.send(encode(TAG_REQUEST, req))
        while True:
            for tag, payload in self._frames.frames():
                if tag != TAG_REPLY:
                    raise SessionUnavailable(f"unexpected frame {tag!r}")
                reply = reply_decoder.decode(payload)
                if not reply.ok:
                    raise SessionUnavailable(f"the agent refused {req.op}: {reply.error}")
                return reply.value
            self._frames.feed(await stream.receive())

    async def _connected(self) -> anyio.abc.SocketStream:
        if self._torn and self._stream is not None:  # never read another request's reply
            await anyio.aclose_forcefully(self._stream)
            self._stream = None
        self._torn = False
        if self._stream is not None:
            return self._stream
        if time.monotonic() < self._retry_at:
            raise _NotYet(self.note or "the agent is unavailable")
        with anyio.fail_after(CONNECT_TIMEOUT_S):
            self._stream = await anyio.connect_unix(self.path)
        self._frames = FrameBuffer()
        self._members.clear()
        self._states.clear()  # ids and versions are the agent's: another agent reuses them
        self._built.clear()
        self._unsent = set(self._listings)
        return self._stream

    async def _member(self, stream: anyio.abc.SocketStream, server: str) -> int:
        mid = self._members.get(server)
        if mid is None:
            req = Request(op="session_join", session=self.name, value={"server": server})
            mid = self._members[server] = int(await self._exchange(stream, req))
        return mid

    async def _flush_listings(self, stream: anyio.abc.SocketStream) -> None:
        for server in sorted(self._unsent):
            mid = await self._member(stream, server)
            value = {"member": mid, "tools": self._listings[server]}
            await self._exchange(stream, Request(op="session_tools", value=value))
            self._unsent.discard(server)

    async def _run(self, step: Callable[[anyio.abc.SocketStream], Awaitable[Any]]) -> Any:
        """One bounded exchange (the listings not yet sent first); None when it failed. A
        connection found closed is replaced at once, once: the agent may have been restarted
        since the last exchange, and this one is then served by the new agent (as a new
        member), not judged on the local view."""
        async with self._lock:
            for again in (True, False):
                try:
                    with anyio.fail_after(EXCHANGE_TIMEOUT_S):
                        had = self._stream is not None
                        stream = await self._connected()
                        await self._flush_listings(stream)
                        value = await step(stream)
                    break
                except (
                    OSError, TimeoutError, SessionUnavailable, ValueError, TypeError,
                    anyio.EndOfStream,
                    anyio.BrokenResourceError, anyio.ClosedResourceError, msgspec.MsgspecError,
                ) as exc:  # fmt: skip
                    if again and had and isinstance(exc, _CLOSED) and self._stream is not None:
                        await anyio.aclose_forcefully(self._stream)  # an old one: anew, once
                        self._stream = None
                        continue
                    if not isinstance(exc, _NotYet):
                        await self._lost(_why(exc))
                    return None
                except BaseException:  # cancelled from outside mid-exchange: reconnect next
                    self._torn = True
                    raise
            if self.note:
                _log.warning("mtguard: session %r: the agent answers again at %s", self.name,
                             self.path)  # fmt: skip
                self.note = ""
            return value

    async def _lost(self, why: str) -> None:
        if self._stream is not None:
            await anyio.aclose_forcefully(self._stream)
            self._stream = None
        self._retry_at = time.monotonic() + RETRY_S
        if why != self.note:
            _log.warning("mtguard: session %r: %s; calls are judged on this guard's own "
                         "view of the session", self.name, why)  # fmt: skip
        self.note = why

    # -- what a guard publishes and reads --------------------------------------------------
    def listing(self, server: str, tools: list[dict[str, Any]]) -> None:
        """A server's new tools/list answer: sent by `serve()` (or the next exchange)."""
        self._listings[server] = clip_tools(tools)
        self._unsent.add(server)
        self._wake.set()

    async def publish(self, server: str, call: SessionCall, result: str | None) -> None:
        """A finished call (`call` as the server's `SessionLog` recorded it) and the whole
        text the agent read (`result`, clipped by the store's bound)."""
        args = call.arguments if len(_enc.encode(call.arguments)) <= MAX_ARGS_BYTES else {}
        shared = SharedCall(seq=call.seq, tool=call.tool, arguments=args, decision=call.decision,
                            result=None if result is None else clip_result(result))  # fmt: skip

        async def step(stream: anyio.abc.SocketStream) -> None:
            value = {"member": await self._member(stream, server), "call": shared}
            await self._exchange(stream, Request(op="session_call", value=value))

        await self._run(step)

    async def read(self, local: dict[str, list[str]]) -> PeerView:
        """The other members of the session, named apart from `local` servers."""

        async def step(stream: anyio.abc.SocketStream) -> Any:
            known = {mid: s.version for mid, s in self._states.items()}
            return await self._exchange(
                stream, Request(op="session_read", session=self.name, value={"known": known})
            )

        got = await self._run(step)
        if got is None:
            return PeerView(note=self.note or "the agent is unavailable")
        versions = {int(k): int(v) for k, v in (got.get("versions") or {}).items()}
        changed = msgspec.convert(got.get("changed") or [], list[MemberState])
        self._states = {m: s for m, s in self._states.items() if m in versions}
        self._states.update({s.id: s for s in changed})
        return PeerView(peers=self._peers(local))

    def _peers(self, local: dict[str, list[str]]) -> dict[str, Peer]:
        states = sorted(self._states.values(), key=lambda s: (s.left, s.id))  # live first
        names = tuple(sorted({n for ns in local.values() for n in ns}
                             | {str(t.get("name")) for s in states if not s.left
                                for t in s.tools}))  # fmt: skip
        peers: dict[str, Peer] = {}
        for s in states:
            again = s.server in local or s.server in peers  # the same server started again
            name = f"{s.server}@{s.pid}#{s.id}" if again else s.server
            cached = self._built.get(s.id)
            if cached is None or cached[0] != s.version or cached[1] != names or (
                cached[2].name != name):  # fmt: skip
                cached = (s.version, names, build_peer(name, s, list(names), s.left or again))
                self._built[s.id] = cached
            peers[name] = cached[2]
        self._built = {m: b for m, b in self._built.items() if m in self._states}
        return peers

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Send new listings as they come (a server no call reached yet is still seen)."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            if self._unsent:
                await self._run(_nothing)

    async def aclose(self) -> None:
        if self._stream is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CONNECT_TIMEOUT_S):
                await self._stream.aclose()
            self._stream = None


async def _nothing(stream: anyio.abc.SocketStream) -> None:
    return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"the agent did not answer within {EXCHANGE_TIMEOUT_S:g} s"
    if isinstance(exc, (anyio.EndOfStream, anyio.BrokenResourceError)):
        return "the agent closed the session connection"
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, SessionUnavailable) else f"the agent is unreachable: {text}"


def session_name(explicit: str | None, host_pid: int) -> str:
    """The session a guard joins: the name it was given, else its host process's."""
    return explicit or f"host-{host_pid}"


__all__ = ["AgentSession", "Peer", "PeerView", "SessionUnavailable", "build_peer", "session_name"]
