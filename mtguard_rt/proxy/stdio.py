"""`mtguard proxy`: an MCP stdio server for the host that relays to the sandboxed server.

Everything that is not `tools/call` passes through both ways untouched (initialize,
tools/list, resources, prompts, pings, progress, cancellation, logging, list_changed, and
server-initiated requests). Each `tools/call` runs through the `Supervisor` in its own task,
so a slow call never blocks pings or other traffic. `tools/list` answers are pinned on the
way back, and a `list_changed` triggers a re-check of the pins. Malformed host lines get a
JSON-RPC error and the proxy keeps serving; when the server dies, later requests get a clear
error. The host side uses the MCP SDK's stdio transport over the host's fds in the event
loop (`hoststdio`: no thread hop per message). Nothing the server sends reaches the host
unscreened (`withhold.Withholder`): a response to a call already handled or to an id the
guard never sent is dropped, a secret in any other message is withheld, and a quarantined
server's requests are refused.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from ..config import GuardConfig
from ..errors import MonitorLost, ServerExited
from ..guard import GuardedServer, open_guard
from ..startup import end_startup
from .prefetch import Prefetch
from .upstream import Message, UpstreamError
from .withhold import WITHHELD, Withholder

PROTOCOL_STAMP = "io.modelcontextprotocol/"  # _meta keys a sessionless revision requires
# the answers that end the server's start-up record (or its first call does: startup.py)
STARTUP_ENDS = frozenset({"initialize", "tools/list"})
# After the host closes stdin, in-flight calls get this long to finish and be recorded.
HOST_EOF_GRACE_S = 5.0
# The host side's third-party modules, imported in a thread while the guard and its sandbox
# start (`Prefetch`): the host's stdio is opened once they are in, its `initialize` waits in
# the pipe meanwhile, and the server's real answer is what the host gets.
HOST_SIDE = ("mcp_types", "mcp.shared.message", "mcp.server.stdio", "mcp.shared.inbound")


def _log(text: str) -> None:
    print(f"mtguard: {text}", file=sys.stderr, flush=True)


class Relay:
    def __init__(self, write: Any = None) -> None:
        self.write: Any = None
        self.host_open = anyio.Event()  # set once `write` is there: a send waits for it
        self.calls: anyio.abc.TaskGroup | None = None  # the calls' group, inside the guard
        self.host_done = anyio.Event()  # the host side is done: the guard may unwind
        self.guard_done = anyio.Event()  # the guard unwound: the host side may close
        if write is not None:
            self.open_host(write)
        self.server: GuardedServer | None = None
        self.list_requests: dict[Any, bool] = {}  # id -> whether it asked for a later page
        self.in_flight: set[Any] = set()
        self.forwarded: dict[Any, str] = {}  # host request id relayed, unanswered -> method
        self.withholder: Withholder | None = None
        self.cancelled: set[Any] = set()
        self.answered: set[Any] = set()  # calls the host got the denial of at the kill
        self.unsettled: set[Any] = set()  # calls whose supervisor has not returned (yet)
        self.idle = anyio.Event()
        self.idle.set()
        self.dropped_from_server = 0

    def open_host(self, write: Any) -> None:
        """The host's write side is there (the MCP SDK with it): sends go out now."""
        import mcp_types
        from mcp.shared.message import SessionMessage

        self._validate = mcp_types.jsonrpc_message_adapter.validate_python
        self._wrap = SessionMessage
        self.write = write
        self.host_open.set()

    async def send(self, message: Message) -> None:
        if self.write is None:  # the server spoke before the host side was open
            await self.host_open.wait()
        try:
            parsed = self._validate(message)
        except ValueError:
            self.dropped_from_server += 1
            _log(f"dropped a message the host could not parse: {str(message)[:200]}")
            return
        await self.write.send(self._wrap(parsed))

    async def error(self, request_id: Any, code: int, text: str) -> None:
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}
        )

    # -- host -> server ---------------------------------------------------------------------
    def attach(self, server: GuardedServer) -> None:
        self.server = server
        self.withholder = Withholder(server.supervisor)
        server.upstream.on_dropped = self.withholder.dropped

    async def from_host(self, message: Message, tg: anyio.abc.TaskGroup) -> None:
        assert self.server is not None
        method, request_id = message.get("method"), message.get("id")
        quarantined = self.server.supervisor.quarantined
        if quarantined is not None and method is not None and request_id is not None:
            if method == "ping":
                await self.send({"jsonrpc": "2.0", "id": request_id, "result": {}})
            elif method != "tools/call":  # a call is refused (and recorded) by the supervisor
                why = f"the server is quarantined after a confidentiality deny ({quarantined})"
                await self.error(request_id, WITHHELD, f"mtguard: {method} refused: {why}")
                return
        meta = (message.get("params") or {}).get("_meta")
        if isinstance(meta, dict):
            stamps = {k: v for k, v in meta.items() if k.startswith(PROTOCOL_STAMP)}
            if stamps:
                self.server.supervisor.protocol_meta = stamps
        if method == "tools/call" and request_id is not None:
            params = message.get("params") or {}
            if not isinstance(params.get("name"), str) or not isinstance(
                params.get("arguments", {}), dict
            ):
                await self.error(
                    request_id,
                    -32602,
                    "tools/call needs params.name (string) and params.arguments (object)",
                )
                return
            self.in_flight.add(request_id)
            self.unsettled.add(request_id)
            self.idle = anyio.Event()
            tg.start_soon(self._call, request_id, params)
            return
        if method == "notifications/cancelled":
            target = (message.get("params") or {}).get("requestId")
            if target in self.in_flight:
                self.cancelled.add(target)
                self.server.upstream.cancel(target, "cancelled by the host")
        if method == "tools/list" and request_id is not None:
            self.list_requests[request_id] = bool((message.get("params") or {}).get("cursor"))
        await self._forward(message)

    async def _forward(self, message: Message) -> None:
        assert self.server is not None
        is_request = "method" in message and message.get("id") is not None
        try:
            if self.server.upstream.closed.is_set():
                raise self.server.upstream.exited()
            if is_request:
                self.forwarded[message["id"]] = str(message["method"])
                self.server.upstream.tombstones.pop(message["id"], None)
            await self.server.upstream.send(message)
        except ServerExited as exc:
            if is_request:
                self.forwarded.pop(message["id"], None)
                await self.error(message["id"], -32002, f"mtguard: {exc}")

    async def server_gone(self) -> None:
        """The server's stdout ended: answer every relayed request still waiting."""
        assert self.server is not None
        await self.server.upstream.closed.wait()
        exc = self.server.upstream.exited()
        _log(f"the server exited: {exc}")
        for request_id in sorted(self.forwarded, key=str):
            await self.error(request_id, -32002, f"mtguard: {exc}")
        self.forwarded.clear()

    async def _call(self, request_id: Any, params: Message) -> None:
        assert self.server is not None
        try:
            meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else None
            outcome = await self.server.supervisor.call(
                params["name"],
                params.get("arguments") or {},
                meta,
                request_id=request_id,
                params=params,
                on_kill=lambda denial: self._killed(request_id, denial),
            )
            self.unsettled.discard(request_id)  # not when the guard fails: fail_closed()
            if request_id in self.cancelled:
                return  # the host gave up on it; the spec says no response follows
            if request_id in self.answered:
                _log(f"denied {params['name']}: {', '.join(outcome.record.rules)}")
                return  # the host has had its denial since the kill
            if outcome.error is not None:
                await self.send({"jsonrpc": "2.0", "id": request_id, "error": outcome.error})
            else:
                await self.send({"jsonrpc": "2.0", "id": request_id, "result": outcome.result})
            if outcome.denied:
                _log(f"denied {params['name']}: {', '.join(outcome.record.rules)}")
        finally:
            self.in_flight.discard(request_id)
            self.cancelled.discard(request_id)
            self.answered.discard(request_id)
            if not self.in_flight:
                self.idle.set()

    @asynccontextmanager
    async def failing_closed(self) -> AsyncIterator[None]:
        """Around the guard: a lost monitor ends it (the sandbox is removed on the way out),
        then every request still waiting is answered with the reason."""
        try:
            yield
        except* MonitorLost as lost:
            with anyio.CancelScope(shield=True), anyio.move_on_after(HOST_EOF_GRACE_S):
                await self.fail_closed(_first(lost))
            raise

    async def fail_closed(self, exc: MonitorLost) -> None:
        """The monitor is lost and the sandbox gone with the guard: every request still
        waiting (calls included) is answered with the reason, none by an unwatched server."""
        _log(f"the monitor is lost, the server was stopped: {exc}")
        calls = sorted(self.unsettled - self.cancelled - self.answered, key=str)
        others = sorted(set(self.forwarded) - set(calls), key=str)  # e.g. a listen stream
        for request_id in calls + others:  # the calls first: what the host waits on most
            text = f"mtguard: the call was not run to its end: {exc}; the server was stopped"
            await self.error(request_id, -32002, text)
        self.unsettled.clear()
        self.forwarded.clear()

    async def _killed(self, request_id: Any, denial: Message) -> None:
        if request_id not in self.cancelled:
            self.answered.add(request_id)
            await self.send({"jsonrpc": "2.0", "id": request_id, "result": denial})

    # -- server -> host ---------------------------------------------------------------------
    async def from_server(self, message: Message) -> None:
        assert self.server is not None and self.withholder is not None
        request_id = message.get("id")
        answered = None
        if "method" not in message:
            if request_id not in self.forwarded:
                self.withholder.unsolicited(message)
                return
            answered = self.forwarded.pop(request_id)
            if answered in STARTUP_ENDS:  # its start-up judged first (a deny quarantines)
                await end_startup(self.server.supervisor)
        screened, answer_server = self.withholder.screen(message, answered)
        if answer_server:  # a server-to-client request the host must not see: refuse it
            error = {"code": WITHHELD, "message": "mtguard: request withheld from the host"}
            refusal = {"jsonrpc": "2.0", "id": request_id, "error": error}
            try:
                await self.server.upstream.send(refusal)
            except ServerExited:
                pass
        if screened is None:
            if request_id is not None:
                self.list_requests.pop(request_id, None)
            return
        message = screened
        if "method" not in message and request_id in self.list_requests:
            paged = self.list_requests.pop(request_id)
            result = message.get("result") or {}
            if not paged and not result.get("nextCursor"):
                self.server.supervisor.observe_tools(result.get("tools") or [])
        elif message.get("method") == "notifications/tools/list_changed":
            self.server.supervisor.tools_stale = True
        await self.send(message)


async def serve_stdio(
    config: GuardConfig,
    command: list[str],
    *,
    name: str | None = None,
    stdin: Any = None,
    stdout: Any = None,
    upstream_url: str | None = None,
    upstream_headers: dict[str, str] | None = None,
) -> None:
    """Serve one host over stdio until it closes stdin. With `upstream_url`, the guarded
    server is that streamable HTTP endpoint (no sandbox, no monitor) instead of `command`.

    The guard and its sandbox start in a task of their own; the host side's modules are
    imported (`Prefetch`) while Docker starts the sandbox and the server starts in it, then
    the host's stdio is opened, and read once the guard is up. The guard's task holds the
    calls' group, so a lost monitor cancels the calls before the sandbox goes and
    `failing_closed` answers them while the host side is open."""
    host_side = Prefetch(HOST_SIDE)
    relay = Relay()
    ready = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_run_guard, relay, ready, host_side, config, command, name,
                          upstream_url, upstream_headers)  # fmt: skip
            await host_side.wait()
            from .hoststdio import host_stdio_server

            async with host_stdio_server(stdin, stdout) as (read_stream, write_stream):
                async with write_stream:
                    relay.open_host(write_stream)
                    await ready.wait()
                    assert relay.calls is not None
                    async for item in read_stream:
                        if isinstance(item, Exception):
                            await _host_parse_error(relay, item)
                            continue
                        message = item.message.model_dump(by_alias=True, exclude_unset=True)
                        await relay.from_host(message, relay.calls)
                    with anyio.move_on_after(HOST_EOF_GRACE_S):
                        await relay.idle.wait()
                    relay.host_done.set()
                    await relay.guard_done.wait()  # what it sends while it unwinds goes out
    finally:
        host_side.join()  # never an import cut short by the interpreter's exit


async def _run_guard(
    relay: Relay,
    ready: anyio.Event,
    host_side: Prefetch,
    config: GuardConfig,
    command: list[str],
    name: str | None,
    upstream_url: str | None,
    upstream_headers: dict[str, str] | None,
) -> None:
    """The guard, its server and the calls' group, until the host side is done."""
    try:
        guarded = open_guard(config, monitor=upstream_url is None)
        async with relay.failing_closed(), guarded as guard:  # a lost monitor: answered
            server_cm: AbstractAsyncContextManager[GuardedServer]
            if upstream_url is None:
                server_cm = guard.connect(
                    command, name, handshake=False, on_message=relay.from_server
                )
                what = " ".join(command)
            else:
                from .remote import connect_server, redact

                server_cm = connect_server(
                    guard, command, name, relay.from_server, upstream_url, upstream_headers
                )
                what = redact(upstream_url)
            host_side.start()  # its imports overlap Docker's work and the server's start
            async with server_cm as server:
                relay.attach(server)
                _log(
                    f"guarding {what!r} {server.upstream.describe()} "
                    f"({'observe' if guard.observe else 'enforce'} mode, {guard.monitor_mode}, "
                    f"audit log "
                    f"{config.audit_log or 'off'})"
                )
                async with anyio.create_task_group() as calls:
                    calls.start_soon(relay.server_gone)
                    relay.calls = calls
                    ready.set()
                    await relay.host_done.wait()
                    calls.cancel_scope.cancel()
    finally:
        relay.guard_done.set()


def _first(group: BaseExceptionGroup[MonitorLost]) -> MonitorLost:
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup):
        inner = inner.exceptions[0]
    assert isinstance(inner, MonitorLost)
    return inner


async def _host_parse_error(relay: Relay, exc: Exception) -> None:
    kinds = {e.get("type") for e in getattr(exc, "errors", lambda: [])()}
    if "json_invalid" in kinds:
        await relay.error(None, -32700, "Parse error: the line is not valid JSON")
    else:
        await relay.error(None, -32600, "Invalid Request: not a JSON-RPC 2.0 message")


__all__ = ["Relay", "UpstreamError", "serve_stdio"]
