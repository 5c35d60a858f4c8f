"""`mtguard proxy --listen HOST:PORT`: the stdio relay served as MCP streamable HTTP at `/mcp`.

Each POST carries one JSON-RPC message. A request is relayed through the same `Relay` as the
stdio front end (so every `tools/call` goes through the supervisor) and answered as JSON, or
as a one-event SSE stream when the client accepts only SSE; notifications and responses are
acknowledged 202. A `subscriptions/listen` request, and a GET, hold an SSE stream open that
carries the server's notifications (`list_changed` included: nothing is filtered out).
Before anything is relayed: Host and Origin must be loopback names when bound to loopback
(or listed with `--allow-origin`), a bearer token is required when bound elsewhere, and the
`Mcp-Method` / `Mcp-Name` / `MCP-Protocol-Version` headers, when sent, must match the body
(`Mcp-Method` for a tools/call, prompts/get or resources/read needs `Mcp-Name` beside it).
Sessions (2025 era): a successful `initialize` issues an `Mcp-Session-Id`; every later 2025
request (and a GET) must carry it; an unknown one gets 404; DELETE ends it, closing its GET
streams and cancelling its requests in flight. 2026-07-28 requests (their protocol version
in `_meta` or the header) need no session. Every read is bounded in size and time; one
request per connection (`Connection: close`). All clients share the one guarded server
(sandboxed, or the `--upstream` URL): one upstream per listener.
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import json
import secrets
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    decode_header_value,
    find_duplicated_routing_header,
)
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import HEADER_MISMATCH, PROTOCOL_VERSION_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..config import GuardConfig
from ..errors import GuardError, MonitorLost
from ..guard import open_guard
from .remote import connect_server, redact
from .stdio import HOST_EOF_GRACE_S, Relay
from .upstream import Message

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 4 * 1024 * 1024  # the MCP SDK's own default limit
READ_TIMEOUT_S = 30.0  # a client that sends its request slower than this is dropped
LISTEN_QUEUE = 256  # server notifications buffered per open SSE stream; more are counted drops
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MCP_SESSION_ID = "mcp-session-id"
MAX_SESSIONS = 1024  # open 2025-era sessions; past this, initialize gets 503
SESSION_NOT_FOUND = -32001  # the MCP SDK server's code for an unknown session


def _log(text: str) -> None:
    print(f"mtguard: {text}", file=sys.stderr, flush=True)


class HttpReject(Exception):
    def __init__(
        self,
        status: int,
        text: str,
        code: int | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(text)
        self.status, self.text, self.code, self.headers = status, text, code, list(headers)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Session:
    """A 2025-era client session: what DELETE releases."""

    listeners: list[Listener] = field(default_factory=list)  # its GET streams
    waiting: set[str] = field(default_factory=set)  # proxy ids of its requests in flight


@dataclass
class Listener:
    """An open SSE stream: a GET (every server-wide notification) or one `subscriptions/listen`
    request (the frames tagged with its id, then its answer)."""

    send: Any
    host_id: Any = None
    dropped: int = 0

    def push(self, message: Message) -> bool:
        """Queue without waiting; False when the stream is gone."""
        try:
            self.send.send_nowait(message)
        except anyio.WouldBlock:
            self.dropped += 1
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True


@dataclass
class Router:
    """The relay's `write` side. Ids were rewritten on the way in (clients' ids may collide),
    so each response goes back to the POST that waits for its id, and each listen-stream frame
    (tagged `_meta[SUBSCRIPTION_ID]` with the listen request's id) to that stream with the
    client's own id restored; everything else the server sends goes to every GET stream."""

    waiting: dict[str, Any] = field(default_factory=dict)  # proxy id -> one-slot send stream
    subscriptions: dict[str, Listener] = field(default_factory=dict)  # proxy id -> stream
    listeners: list[Listener] = field(default_factory=list)  # GET streams
    ids: Any = field(default_factory=lambda: itertools.count(1))

    async def send(self, session_message: Any) -> None:
        message = session_message.message.model_dump(by_alias=True, exclude_unset=True)
        request_id = message.get("id")
        if "method" not in message and isinstance(request_id, str):
            if request_id in self.waiting:
                with contextlib.suppress(
                    anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
                ):
                    self.waiting.pop(request_id).send_nowait(message)
                return
            if request_id in self.subscriptions:
                listener = self.subscriptions[request_id]
                listener.push({**message, "id": listener.host_id})
                return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        sub = meta.get(SUBSCRIPTION_ID_META_KEY)
        if isinstance(sub, str) and sub in self.subscriptions:
            listener = self.subscriptions[sub]
            tagged = {**meta, SUBSCRIPTION_ID_META_KEY: listener.host_id}
            listener.push({**message, "params": {**params, "_meta": tagged}})
            return
        for listener in list(self.listeners):
            if not listener.push(message):
                self.listeners.remove(listener)


class HttpFront:
    def __init__(
        self,
        relay: Relay,
        router: Router,
        tg: anyio.abc.TaskGroup,
        *,
        loopback: bool,
        token: str | None,
        allowed_origins: Sequence[str],
        response_timeout_s: float,
    ) -> None:
        self.relay, self.router, self.tg = relay, router, tg
        self.loopback, self.token = loopback, token
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.response_timeout_s = response_timeout_s
        self.sessions: dict[str, Session] = {}
        self.answering = 0  # requests relayed whose answer is not written yet (GETs aside)
        self._quiet = anyio.Event()
        self._quiet.set()

    async def replied(self) -> None:
        """Until every relayed request's answer is written (or its client left)."""
        await self._quiet.wait()

    @contextlib.contextmanager
    def _answering(self) -> Iterator[None]:
        self.answering += 1
        self._quiet = anyio.Event() if self._quiet.is_set() else self._quiet
        try:
            yield
        finally:
            self.answering -= 1
            if not self.answering:
                self._quiet.set()

    async def handle(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(READ_TIMEOUT_S):
                    request = await _read_request(stream)
                self.check(request)
                await self.dispatch(request, stream)
            except HttpReject as exc:
                await _reply_error(stream, exc)
            except (
                TimeoutError,
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ):
                pass  # the client went away or stalled; nothing to answer

    def check(self, request: Request) -> None:
        if request.path.split("?", 1)[0] != "/mcp":
            raise HttpReject(404, "not found: MCP is served at /mcp")
        host = request.headers.get("host", "")
        if self.loopback and _hostname(f"//{host}") not in LOOPBACK_NAMES:
            raise HttpReject(421, f"Host {host!r} is not a loopback name (DNS rebinding?)")
        origin = request.headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            raise HttpReject(403, f"Origin {origin!r} is not allowed")
        if self.token is not None:
            given = request.headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                value.strip().encode(), self.token.encode()
            ):
                raise HttpReject(
                    401,
                    "a valid bearer token is required",
                    headers=[("WWW-Authenticate", 'Bearer realm="mtguard"')],
                )

    def _origin_ok(self, origin: str) -> bool:
        if origin.rstrip("/").lower() in self.allowed_origins:
            return True
        return self.loopback and _hostname(origin) in LOOPBACK_NAMES

    async def dispatch(self, request: Request, stream: anyio.abc.ByteStream) -> None:
        accept = request.headers.get("accept", "")
        session_id = request.headers.get(MCP_SESSION_ID)
        session = None
        if session_id is not None and request.method in ("GET", "POST", "DELETE"):
            session = self.sessions.get(session_id)
            if session is None:
                raise HttpReject(
                    404, "session not found: it ended or never existed; initialize a new one",
                    SESSION_NOT_FOUND,
                )
        if request.method == "DELETE":
            if session_id is None:
                raise HttpReject(400, "DELETE /mcp ends a session: send its Mcp-Session-Id")
            await self.end_session(session_id)
            await _reply(stream, 204, [], b"")
            return
        if request.method == "GET":
            if "text/event-stream" not in accept:
                raise HttpReject(406, "GET /mcp opens an SSE stream: accept text/event-stream")
            if session is None:
                raise HttpReject(400, "GET /mcp needs the Mcp-Session-Id that initialize "
                                      "returned (2026-07-28 clients use subscriptions/listen)")
            await self.stream_events(stream, session=session)
            return
        if request.method != "POST":
            raise HttpReject(
                405, f"{request.method} is not supported on /mcp",
                headers=[("Allow", "GET, POST, DELETE")],
            )
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise HttpReject(415, "Content-Type must be application/json")
        try:
            message = json.loads(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpReject(400, "Parse error: the body is not valid JSON", -32700) from exc
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise HttpReject(400, "Invalid Request: one JSON-RPC 2.0 message per POST", -32600)
        _check_routing_headers(request.headers, message)
        opens = message.get("method") == "initialize"
        if opens and session is not None:
            raise HttpReject(400, "initialize opens a new session: send it without Mcp-Session-Id")
        if not opens and session is None and not _sessionless(request.headers, message):
            raise HttpReject(
                400, "Mcp-Session-Id header is required: send the id initialize returned "
                "(2026-07-28 requests carry their protocol version instead)",
            )
        if opens and len(self.sessions) >= MAX_SESSIONS:
            raise HttpReject(503, f"too many open sessions ({MAX_SESSIONS}): end some with DELETE")
        if "method" not in message or message.get("id") is None:
            await self.relay.from_host(message, self.tg)  # notification or response: relayed
            await _reply(stream, 202, [], b"")
            return
        if "application/json" not in accept and "text/event-stream" not in accept:
            raise HttpReject(406, "accept application/json or text/event-stream")
        await self.answer(
            message, stream, sse="application/json" not in accept, session=session, opens=opens
        )

    async def answer(
        self, message: Message, stream: anyio.abc.ByteStream, *, sse: bool,
        session: Session | None = None, opens: bool = False,
    ) -> None:
        with self._answering():
            await self._answer(message, stream, sse=sse, session=session, opens=opens)

    async def _answer(
        self, message: Message, stream: anyio.abc.ByteStream, *, sse: bool,
        session: Session | None, opens: bool,
    ) -> None:
        host_id = message["id"]
        proxy_id = f"mtguard-http-{next(self.router.ids)}"
        forwarded = {**message, "id": proxy_id}
        if message["method"] == "subscriptions/listen":
            await self.stream_events(stream, forwarded, proxy_id, host_id)
            return
        send, receive = anyio.create_memory_object_stream[Message](1)
        self.router.waiting[proxy_id] = send
        if session is not None:
            session.waiting.add(proxy_id)
        try:
            with send, receive:
                await self.relay.from_host(forwarded, self.tg)
                with anyio.fail_after(self.response_timeout_s):
                    response = await receive.receive()
        except TimeoutError:
            response = {"jsonrpc": "2.0", "error": {
                "code": -32001, "message": "mtguard: no response from the server in time"}}
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            response = {"jsonrpc": "2.0", "error": {
                "code": -32800, "message": "mtguard: the session was ended (DELETE)"}}
        finally:
            self.router.waiting.pop(proxy_id, None)
            if session is not None:
                session.waiting.discard(proxy_id)
        headers: list[tuple[str, str]] = []
        if opens and "result" in response:
            session_id = secrets.token_hex(16)
            self.sessions[session_id] = Session()
            headers.append(("Mcp-Session-Id", session_id))
        body = json.dumps({**response, "id": host_id}).encode()
        if sse:
            await _reply(stream, 200, [("Content-Type", "text/event-stream"), *headers],
                         b"event: message\ndata: " + body + b"\n\n")
        else:
            await _reply(stream, 200, [("Content-Type", "application/json"), *headers], body)

    async def end_session(self, session_id: str) -> None:
        """DELETE: forget the session, close its GET streams, cancel its requests in flight
        (their POSTs are answered with an error at once)."""
        session = self.sessions.pop(session_id)
        for listener in session.listeners:
            listener.send.close()
        for proxy_id in sorted(session.waiting):
            await self.relay.from_host(
                {"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": proxy_id, "reason": "the HTTP session was ended"}},
                self.tg,
            )
            waiting = self.router.waiting.pop(proxy_id, None)
            if waiting is not None:
                waiting.close()

    async def stream_events(
        self, stream: anyio.abc.ByteStream, forwarded: Message | None = None,
        proxy_id: str | None = None, host_id: Any = None, session: Session | None = None,
    ) -> None:
        """An SSE response that stays open: a GET's (server-wide notifications, until the
        client leaves) or a listen request's (its frames, until the server answers it). The
        stream is registered before the request is relayed, so no early frame is missed."""
        send, receive = anyio.create_memory_object_stream[Message](LISTEN_QUEUE)
        listener = Listener(send, host_id)
        if proxy_id is None:
            self.router.listeners.append(listener)
        else:
            self.router.subscriptions[proxy_id] = listener
        if session is not None:
            session.listeners.append(listener)
        try:
            with send, receive:
                await stream.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                  b"Cache-Control: no-store\r\nConnection: close\r\n\r\n")
                if forwarded is not None:
                    await self.relay.from_host(forwarded, self.tg)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_cancel_on_hang_up, stream, tg.cancel_scope)
                    async for message in receive:
                        data = json.dumps(message).encode()
                        await stream.send(b"event: message\ndata: " + data + b"\n\n")
                        if proxy_id is not None and "method" not in message:
                            tg.cancel_scope.cancel()  # the listen request was answered
                    tg.cancel_scope.cancel()  # closed by DELETE: stop watching for hang-up
        finally:
            if listener in self.router.listeners:
                self.router.listeners.remove(listener)
            if session is not None and listener in session.listeners:
                session.listeners.remove(listener)
            if proxy_id is not None:
                self.router.subscriptions.pop(proxy_id, None)
            if listener.dropped:
                _log(f"an SSE stream fell behind: {listener.dropped} notification(s) dropped")


async def _cancel_on_hang_up(stream: anyio.abc.ByteStream, scope: anyio.CancelScope) -> None:
    """The client closing its side ends an open SSE stream."""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                             anyio.ClosedResourceError):
        while await stream.receive():
            pass
    scope.cancel()


def _hostname(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def _check_routing_headers(headers: dict[str, str], message: Message) -> None:
    """Headers a gateway might route or filter on must say what the body says."""

    def mismatch(what: str) -> HttpReject:
        return HttpReject(400, f"{what} header does not match the request body", HEADER_MISMATCH)

    method = message.get("method")
    if MCP_METHOD_HEADER in headers and headers[MCP_METHOD_HEADER] != method:
        raise mismatch("Mcp-Method")
    raw = message.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    key = NAME_BEARING_METHODS.get(method) if isinstance(method, str) else None
    if MCP_METHOD_HEADER in headers and key is not None and MCP_NAME_HEADER not in headers:
        raise HttpReject(
            400, f"Mcp-Method {method} needs an Mcp-Name header (the params.{key})",
            HEADER_MISMATCH,
        )
    if MCP_NAME_HEADER in headers and (
        key is None or decode_header_value(headers[MCP_NAME_HEADER]) != params.get(key)
    ):
        raise mismatch("Mcp-Name")
    raw_meta = params.get("_meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    version = meta.get(PROTOCOL_VERSION_META_KEY)
    if (
        version is not None
        and MCP_PROTOCOL_VERSION_HEADER in headers
        and (headers[MCP_PROTOCOL_VERSION_HEADER] != version)
    ):
        raise mismatch("MCP-Protocol-Version")


def _sessionless(headers: dict[str, str], message: Message) -> bool:
    """A 2026-07-28 message (or the probe for it): it carries its protocol version itself."""
    if headers.get(MCP_PROTOCOL_VERSION_HEADER) in MODERN_PROTOCOL_VERSIONS:
        return True
    if message.get("method") == "server/discover":
        return True
    raw = message.get("params")
    meta = raw.get("_meta") if isinstance(raw, dict) else None
    return isinstance(meta, dict) and meta.get(PROTOCOL_VERSION_META_KEY) is not None


async def _read_request(stream: anyio.abc.ByteStream) -> Request:
    reader = BufferedByteReceiveStream(stream)
    try:
        head = await reader.receive_until(b"\r\n\r\n", MAX_HEADER_BYTES)
    except anyio.DelimiterNotFound as exc:
        raise HttpReject(431, "request headers too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpReject(400, "malformed request line")
    headers: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpReject(400, "malformed header line")
        pairs.append((name.strip().lower(), value.strip()))
        headers[name.strip().lower()] = value.strip()
    if (twice := find_duplicated_routing_header(pairs)) is not None:
        raise HttpReject(400, f"the {twice} header appears more than once", HEADER_MISMATCH)
    if sum(1 for name, _ in pairs if name == MCP_SESSION_ID) > 1:
        raise HttpReject(400, "the Mcp-Session-Id header appears more than once")
    if "transfer-encoding" in headers:
        raise HttpReject(411, "send the body with Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError as exc:
        raise HttpReject(400, "bad Content-Length") from exc
    if length < 0 or length > MAX_BODY_BYTES:
        raise HttpReject(413, f"body over {MAX_BODY_BYTES} bytes")
    body = await reader.receive_exactly(length) if length else b""
    return Request(parts[0].upper(), parts[1], headers, body)


async def _reply(
    stream: anyio.abc.ByteStream, status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    reason = {
        200: "OK",
        202: "Accepted",
        204: "No Content",
        400: "Bad Request",
        401: "Unauthorized",
        403: "Forbidden",
        404: "Not Found",
        405: "Method Not Allowed",
        406: "Not Acceptable",
        411: "Length Required",
        413: "Content Too Large",
        415: "Unsupported Media Type",
        421: "Misdirected Request",
        431: "Request Header Fields Too Large",
        503: "Service Unavailable",
    }.get(status, "Error")
    head = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers),
    ]
    await stream.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


async def _reply_error(stream: anyio.abc.ByteStream, exc: HttpReject) -> None:
    error = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": exc.code if exc.code is not None else -32600,
            "message": f"mtguard: {exc.text}",
        },
    }
    try:
        await _reply(
            stream,
            exc.status,
            [("Content-Type", "application/json"), *exc.headers],
            json.dumps(error).encode(),
        )
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    """SIGTERM/SIGINT stop serving, so the sandbox is torn down by its own exit path."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            _log(f"stopping on signal {signum}")
            scope.cancel()
            return


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise GuardError(f"--listen wants HOST:PORT (e.g. 127.0.0.1:8765), got {value!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_NAMES or host.startswith("127.")


async def serve_http(
    config: GuardConfig,
    command: list[str],
    *,
    host: str,
    port: int,
    name: str | None = None,
    token: str | None = None,
    allowed_origins: Sequence[str] = (),
    upstream_url: str | None = None,
    upstream_headers: dict[str, str] | None = None,
) -> None:
    """Serve MCP over streamable HTTP on host:port until cancelled. With `upstream_url`, the
    guarded server is that streamable HTTP endpoint instead of `command` in a sandbox."""
    loopback = is_loopback(host)
    if not loopback and not token:
        raise GuardError(
            f"--listen {host}:{port} is not loopback: set a bearer token with "
            "--token or MTGUARD_HTTP_TOKEN"
        )
    router = Router()
    relay = Relay(router)
    front: HttpFront | None = None
    # The exchanges run in a group outside the guard: when the monitor is lost, the guard
    # unwinds (its calls cancelled, the sandbox removed), `failing_closed` answers what waits
    # and those answers still reach the clients (the stdio front's way), then all ends.
    async with anyio.create_task_group() as exchanges:
        try:
            async with (
                relay.failing_closed(),
                open_guard(config, monitor=upstream_url is None) as guard,
                connect_server(
                    guard, command, name, relay.from_server, upstream_url, upstream_headers
                ) as server,
            ):
                relay.attach(server)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(relay.server_gone)
                    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
                    bound = listener.listeners[0].extra(anyio.abc.SocketAttribute.local_port)
                    front = HttpFront(
                        relay,
                        router,
                        tg,
                        loopback=loopback,
                        token=token,
                        allowed_origins=allowed_origins,
                        response_timeout_s=config.call_timeout_s + READ_TIMEOUT_S,
                    )
                    tg.start_soon(_stop_on_signal, tg.cancel_scope)
                    what = redact(upstream_url) if upstream_url else " ".join(command)
                    _log(
                        f"guarding {what!r} {server.upstream.describe()} ({guard.monitor_mode}), "
                        f"serving MCP at "
                        f"http://{host if ':' not in host else f'[{host}]'}:{bound}/mcp"
                    )
                    async with listener:
                        await listener.serve(front.handle, task_group=exchanges)
        except* MonitorLost:
            if front is not None:  # the answers written before the exchanges are cancelled
                with anyio.CancelScope(shield=True), anyio.move_on_after(HOST_EOF_GRACE_S):
                    await front.replied()
            raise
        exchanges.cancel_scope.cancel()  # served to the end: open GET streams close too


__all__ = ["HttpFront", "Router", "is_loopback", "parse_listen", "serve_http"]
