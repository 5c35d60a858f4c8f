"""The session as the LLM judge sees it: every server's tools (names and input schemas, free
text stripped) and the recent calls across servers, each with what its server answered.

`SessionLog` (one per supervisor) records each finished call and the result text the agent
read, stamped from one process-wide sequence so that calls to different servers interleave
in the order they happened (wall-clock nanoseconds, strictly increasing: the agent's session
merges several proxies' logs by it, agent/session_client.py). `session_view(own, servers,
route)` gathers the tool listings and logs of every server `route` reaches into an
immutable `SessionView`; `render_*` write it for the prompt, every result fenced as
untrusted with the server it came from. Bounded:
a log keeps `RECENT_CALLS` calls and each result's first `MAX_RESULT_CHARS`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import msgspec

from ..model import DeclaredCall
from .schema import strip_descriptions
from .text import iter_strings, leaf_key

RECENT_CALLS = 8  # per server, and shown across servers
MAX_RESULT_CHARS = 1000  # of each recent result, in the log and the prompt
MAX_REGISTRY_CHARS = 12000  # the registry in the prompt; the rest listed by name only
MAX_ARGUMENT_CHARS = 600  # of each recent call's arguments in the prompt

_last_seq = 0  # one order for every server's calls in this process, comparable across them


def next_seq() -> int:
    """The next call's place in the session: now in nanoseconds, after the last one."""
    global _last_seq
    _last_seq = max(_last_seq + 1, time.time_ns())
    return _last_seq
_json = msgspec.json.Encoder(order="sorted", enc_hook=repr)


def fence(text: str) -> str:
    """Untrusted text cannot close (or open) the <untrusted> block that holds it."""
    return text.replace("</untrusted", "<\\/untrusted").replace("<untrusted", "<\\untrusted")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} chars cut]"


def _label(name: str) -> str:
    """A server or tool name safe inside a fence's attribute (names come from config and
    listings: quotes and brackets are dropped)."""
    return "".join(c for c in name if c not in "\"'<>\n\r")[:80]


@dataclass(frozen=True, slots=True)
class SessionTool:
    server: str
    name: str
    input_schema: dict[str, Any]  # free text stripped


@dataclass(frozen=True, slots=True)
class SessionCall:
    seq: int
    server: str
    tool: str
    arguments: dict[str, Any]
    decision: str  # "allow" | "deny" (the verdict; in observe mode what it would have been)
    result: str | None  # the text the agent read (clipped); None when nothing reached it


def result_text(result: Any) -> str:
    """What a result says: its strings, without the content items' `type`/`mimeType` tags
    and binary `data` (an image is named, not dumped)."""
    out = []
    for key, text in iter_strings(result):
        leaf = leaf_key(key)
        if leaf in ("type", "mimeType"):
            continue
        if leaf == "data" and key.startswith("content["):
            out.append("[binary content]")
            continue
        out.append(text)
    return "\n".join(out)


@dataclass
class SessionLog:
    """One server's recent calls, in the session-wide order."""

    server: str
    calls: deque[SessionCall] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))

    def record(self, call: DeclaredCall, decision: str, result: Any = None) -> None:
        text = None if result is None else _clip(result_text(result), MAX_RESULT_CHARS)
        self.calls.append(
            SessionCall(
                next_seq(), call.server, call.tool, dict(call.arguments), decision, text
            )
        )


@dataclass(frozen=True)
class SessionView:
    calls: tuple[SessionCall, ...] = ()  # oldest first, at most RECENT_CALLS
    # (server, its tools/list listing): stripped into `tools` only when the judge's prompt
    # asks, not on every call's context
    listings: tuple[tuple[str, Any], ...] = ()

    @cached_property
    def tools(self) -> tuple[SessionTool, ...]:
        return tuple(t for server, listing in self.listings for t in _tools_of(server, listing))

    def __bool__(self) -> bool:
        return bool(self.calls or self.tools)


def _tools_of(server: str, listing: Any) -> list[SessionTool]:
    tools = listing.values() if isinstance(listing, dict) else listing or []
    out = []
    for t in tools:
        if isinstance(t, dict) and t.get("name"):
            schema = t.get("inputSchema")
            out.append(
                SessionTool(
                    server,
                    str(t["name"]),
                    strip_descriptions(schema) if isinstance(schema, dict) else {},
                )
            )
    return out


def session_view(
    own: Any, servers: Iterable[str], route: Callable[[str], Any] | None
) -> SessionView:
    """The view from `own` (a supervisor: its `name`, `tools` listing and `session` log) and
    every other server of the session `route` reaches by name."""
    members = [own]
    if route is not None:
        for name in servers:
            other = route(name) if name != own.name else None
            if other is not None and other is not own:
                members.append(other)
    calls: list[SessionCall] = []
    for m in members:
        log = getattr(m, "session", None)
        if isinstance(log, SessionLog):
            calls += log.calls
    calls.sort(key=lambda c: c.seq)
    listings = tuple((str(m.name), getattr(m, "tools", None)) for m in members)
    return SessionView(calls=tuple(calls[-RECENT_CALLS:]), listings=listings)


def render_registry(view: SessionView | None, limit: int = MAX_REGISTRY_CHARS) -> str:
    """One line per tool, `server.tool <input schema>`, inside the budget; the rest by name."""
    if not view or not view.tools:
        return "(no listing)"
    lines: list[str] = []
    used = 0
    rest: list[str] = []
    for t in view.tools:
        line = f"- server {t.server!r}, tool {t.name!r}: {_json.encode(t.input_schema).decode()}"
        if used + len(line) > limit:
            rest.append(f"{t.server}.{t.name}")
            continue
        lines.append(line)
        used += len(line) + 1
    if rest:
        lines.append(f"- {len(rest)} more tools, schemas left out: {', '.join(rest)}")
    return fence("\n".join(lines))


def render_calls(view: SessionView | None) -> str:
    """The recent calls, oldest first: each call's arguments and its result fenced apart,
    the result's fence naming the server that wrote it."""
    calls = view.calls if view else ()
    if not calls:
        return "(none yet)"
    out = []
    for i, c in enumerate(calls, 1):
        args = fence(_clip(_json.encode(c.arguments).decode(), MAX_ARGUMENT_CHARS))
        server = _label(c.server)
        head = f"{i}. server {server!r}, tool {_label(c.tool)!r} ({c.decision})"
        out.append(f"{head}\n   arguments: <untrusted>{args}</untrusted>")
        if c.result is None:
            out.append("   result: (not shown to the agent)")
        else:
            body = fence(c.result)
            out.append(f'   result: <untrusted from="{server}">\n{body}\n</untrusted>')
    return "\n".join(out)
