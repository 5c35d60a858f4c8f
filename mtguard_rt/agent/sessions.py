"""`SessionStore`: the agent's sessions, each the union of its guards' session logs.

A session is named by its guards (default: the host process that started the proxies) and
scoped to the peer's uid, so a client only ever joins, writes and reads sessions of its own
uid. Each server a guard connects is a member: its tool listing (name, description, input
schema, annotations: what the cross-server rules read) and its last `RECENT_CALLS` finished
calls with the result text the agent read. A connection that ends leaves the session: its
members are kept as history for the others, at most `MAX_DEPARTED` of them. Everything is
bounded (members per session, sessions per uid, listing bytes, result and argument sizes),
so a read's reply stays far below the wire's frame limit.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict, deque
from typing import Any

import msgspec

from ..audit.session import RECENT_CALLS
from ..errors import GuardError

MAX_MEMBERS = 24  # live members of one session (servers of one host)
MAX_DEPARTED = 8  # members whose guard left, kept as history for the others
MAX_SESSIONS = 64  # per uid; past it the session idle longest is dropped
MAX_NAME = 200  # a session's or server's name
MAX_TOOLS_BYTES = 128 << 10  # a member's listing, msgpack-encoded; the rest is cut
MAX_TOOLS = 256
MAX_RESULT_CHARS = 16 << 10  # a result's text kept: head and tail
MAX_ARGS_BYTES = 4 << 10  # a call's arguments, msgpack-encoded; larger ones are dropped
TOOL_FIELDS = ("name", "description", "inputSchema", "annotations")

_enc = msgspec.msgpack.Encoder()


class SharedCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One finished call as its guard's `SessionLog` holds it, with the full result text."""

    seq: int  # the guard's session sequence (wall-clock nanoseconds: comparable across hosts)
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    decision: str = "allow"
    result: str | None = None  # the text the agent read; None when nothing reached it


class MemberState(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: int
    server: str
    pid: int
    version: int = 0
    left: bool = False
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    calls: list[SharedCall] = msgspec.field(default_factory=list)


def clip_result(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} chars cut ...]\n{text[-half:]}"


def clip_tools(tools: Any) -> list[dict[str, Any]]:
    """A listing as the store keeps it: the fields the rules read, within the byte budget."""
    out: list[dict[str, Any]] = []
    used = 0
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        kept = {k: t[k] for k in TOOL_FIELDS if k in t}
        size = len(_enc.encode(kept))
        if used + size > MAX_TOOLS_BYTES or len(out) >= MAX_TOOLS:
            break
        out.append(kept)
        used += size
    return out


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise GuardError("a session or server name must be 1-200 characters")
    return value


class Member:
    def __init__(self, mid: int, server: str, owner: object, pid: int) -> None:
        self.state = MemberState(id=mid, server=server, pid=pid)
        self.owner = owner  # the connection that publishes it
        self.calls: deque[SharedCall] = deque(maxlen=RECENT_CALLS)

    def touch(self) -> None:
        self.state.version += 1

    def snapshot(self) -> MemberState:
        return msgspec.structs.replace(self.state, calls=list(self.calls))


class Session:
    def __init__(self) -> None:
        self.live: dict[int, Member] = {}
        self.departed: deque[Member] = deque(maxlen=MAX_DEPARTED)
        self.used = time.monotonic()

    def members(self) -> list[Member]:
        return [*self.departed, *self.live.values()]


class SessionStore:
    """Every session of the agent, keyed by (uid, name). `owner` is a connection object."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[tuple[int, str], Session] = OrderedDict()
        self._joined: dict[object, list[tuple[Session, Member]]] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._sessions)

    def _session(self, uid: int, name: str) -> Session:
        key = (uid, name)
        session = self._sessions.get(key)
        if session is None:
            mine = [k for k in self._sessions if k[0] == uid]
            if len(mine) >= MAX_SESSIONS:  # the one idle longest (no live member first)
                idle = min(mine, key=lambda k: (bool(self._sessions[k].live),
                                                 self._sessions[k].used))  # fmt: skip
                del self._sessions[idle]
            session = self._sessions[key] = Session()
        session.used = time.monotonic()
        return session

    def _member(self, owner: object, mid: Any) -> Member:
        for _, member in self._joined.get(owner, []):
            if member.state.id == mid:
                return member
        raise GuardError(f"member {mid!r} is not one of this connection's")

    def join(self, owner: object, uid: int, pid: int, session: Any, server: Any) -> int:
        s = self._session(uid, _name(session))
        if len(s.live) >= MAX_MEMBERS:
            raise GuardError(f"session {session!r} is full ({MAX_MEMBERS} servers)")
        member = Member(next(self._ids), _name(server), owner, pid)
        s.live[member.state.id] = member
        self._joined.setdefault(owner, []).append((s, member))
        return member.state.id

    def tools(self, owner: object, mid: Any, tools: Any) -> None:
        member = self._member(owner, mid)
        member.state.tools = clip_tools(tools)
        member.touch()

    def call(self, owner: object, mid: Any, raw: Any) -> None:
        member = self._member(owner, mid)
        call = msgspec.convert(raw, SharedCall)
        if call.result is not None:
            call.result = clip_result(call.result)
        if len(_enc.encode(call.arguments)) > MAX_ARGS_BYTES:
            call.arguments = {}
        call.tool = call.tool[:MAX_NAME]
        member.calls.append(call)
        member.touch()

    def read(self, owner: object, uid: int, session: Any, known: Any) -> dict[str, Any]:
        """The members of session (uid, `session`) but the owner's own: every one's version,
        and the whole state of those whose version differs from `known` ({id: version})."""
        seen = known if isinstance(known, dict) else {}
        versions: dict[int, int] = {}
        changed: list[MemberState] = []
        s = self._sessions.get((uid, _name(session)))
        for m in s.members() if s is not None else ():
            if m.owner is owner:
                continue
            versions[m.state.id] = m.state.version
            if seen.get(m.state.id) != m.state.version:
                changed.append(m.snapshot())
        if s is not None:
            s.used = time.monotonic()
        return {"versions": versions, "changed": changed}

    def summary(self, uid: int) -> list[dict[str, Any]]:
        """uid's sessions as `mtguard doctor` shows them: each name, its live servers (and
        their proxies' pids), how many members left."""
        return [
            {"name": name, "servers": [[m.state.server, m.state.pid] for m in s.live.values()],
             "left": len(s.departed)}
            for (owner_uid, name), s in self._sessions.items()
            if owner_uid == uid
        ]  # fmt: skip

    def leave(self, owner: object) -> None:
        """The connection ended: its members leave their sessions, kept as history."""
        for s, member in self._joined.pop(owner, []):
            if s.live.pop(member.state.id, None) is not None:
                member.state.left = True
                member.touch()
                s.departed.append(member)

    def handle(self, owner: object, uid: int, pid: int, op: str, session: str, value: Any) -> Any:
        """One `session_*` request of a connection (protocol.py)."""
        v = value if isinstance(value, dict) else {}
        if op == "session_join":
            return self.join(owner, uid, pid, session, v.get("server"))
        if op == "session_tools":
            self.tools(owner, v.get("member"), v.get("tools"))
            return None
        if op == "session_call":
            self.call(owner, v.get("member"), v.get("call"))
            return None
        if op == "session_read":
            return self.read(owner, uid, session, v.get("known"))
        raise GuardError(f"unknown request {op!r}")
