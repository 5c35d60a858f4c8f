"""`mtguard proxy --upstream URL`: guard an MCP server that itself speaks streamable HTTP.

`HttpUpstream` is the `Upstream` for a URL, following the MCP SDK's streamable HTTP client:
each message is one POST (`Accept: application/json, text/event-stream`) answered by JSON or
by an SSE stream whose messages are delivered as they arrive (server notifications included);
the `Mcp-Session-Id` that `initialize` returns rides on every later request and is DELETEd on
close; `MCP-Protocol-Version` carries the negotiated version, or a 2026-07-28 message's own
envelope version with the `Mcp-Method` / `Mcp-Name` / `Mcp-Param-*` headers that revision
requires. A session the server forgot (404) is re-initialized once with the host's own
`initialize`. Every failure (refused, timeout, redirect, non-MCP answer, malformed SSE)
answers the request it broke with a JSON-RPC error that says what happened; upstream headers
(tokens) are never logged. There is no sandbox and nothing to trace: `RemoteWatch` marks each
call's tree untraced, so post rules that need a tree report themselves skipped.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    aclosing,
    asynccontextmanager,
    nullcontext,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import httpx2
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp_types import PROTOCOL_VERSION_META_KEY

from ..errors import GuardError, ServerExited
from ..model import BehaviorTree, DeclaredCall
from .upstream import Message, Upstream

if TYPE_CHECKING:
    from ..guard import Guard, GuardedServer

MCP_SESSION_ID = "mcp-session-id"
REMOTE_REASON = "remote upstream: no behavior observed"
UNREACHABLE = -32002  # the code the stdio proxy uses for "the server is gone"
NOT_MCP = -32603
CONNECT_TIMEOUT_S = 10.0  # a loopback or LAN server that does not accept in 10 s is down
CLOSE_TIMEOUT_S = 5.0  # the session DELETE on shutdown; the proxy exits regardless
MAX_RESPONSE_BYTES = 64 << 20  # the stdio upstream's line bound: a 16 MB result must pass
SEND_QUEUE = 64  # messages waiting for the writer; a full queue is back-pressure on the host
TOKEN_ENV = "MTGUARD_UPSTREAM_TOKEN"  # a bearer token for the upstream, kept out of argv
# Headers mtguard derives from each message; a user-supplied copy would contradict them.
MANAGED_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "content-type",
        "content-length",
        "host",
        MCP_SESSION_ID,
        MCP_PROTOCOL_VERSION_HEADER,
        MCP_METHOD_HEADER,
        MCP_NAME_HEADER,
        "last-event-id",
    }
)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def _log(text: str) -> None:
    print(f"mtguard: {text}", file=sys.stderr, flush=True)


class RemoteUpstreamClosed(ServerExited):
    """The HTTP upstream connection is shut down (a `ServerExited`, so callers need no
    second case)."""

    def __init__(self, url: str, why: str) -> None:
        self.command, self.exit_code, self.stderr_tail = url, None, ""
        GuardError.__init__(self, f"the upstream {url} is closed: {why}")


def check_upstream_url(url: str) -> str:
    """The URL, if it is an absolute http(s) URL; else a `GuardError` that says why not."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise GuardError(f"--upstream {redact(url)!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise GuardError(
            f"--upstream {redact(url)!r}: only http:// and https:// URLs are spoken (MCP "
            "streamable HTTP); run a stdio server with `mtguard proxy -- SERVER_CMD` instead"
        )
    if not parts.hostname:
        raise GuardError(f"--upstream {redact(url)!r} has no host")
    return url


def redact(url: str) -> str:
    """The URL without userinfo (a password in the URL must not reach a log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def parse_header(item: str) -> tuple[str, str]:
    """`Name: value` from `--upstream-header`."""
    name, sep, value = item.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _TOKEN.match(name):  # the item is not echoed: it may hold a token
        why = "no ':'" if not sep else "the name before ':' is not an HTTP header name"
        raise GuardError(
            f"--upstream-header wants 'Name: value' (e.g. 'Authorization: Bearer ...'): {why}"
        )
    if any(c in value for c in "\r\n\0"):
        raise GuardError(f"--upstream-header {name}: the value has a line break or NUL")
    if name.lower() in MANAGED_HEADERS:
        raise GuardError(f"--upstream-header {name}: mtguard sets this header itself")
    return name, value


def upstream_headers(items: list[str], env: Mapping[str, str]) -> dict[str, str]:
    headers = dict(parse_header(item) for item in items)
    token = env.get(TOKEN_ENV)
    if token and not any(k.lower() == "authorization" for k in headers):
        headers["Authorization"] = f"Bearer {token}"
    return headers


def remote_name(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}-{parts.port}" if parts.port else str(parts.hostname)


def _envelope_version(message: Message) -> str | None:
    """A 2026-07-28 message's own protocol version (`params._meta`), if it carries one."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


class _Failed(Exception):
    """One request's exchange failed; `code` and text become its JSON-RPC error."""

    def __init__(self, text: str, code: int = UNREACHABLE) -> None:
        super().__init__(text)
        self.code = code


class HttpUpstream(Upstream):
    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        on_message: Callable[[Message], Awaitable[None]] | None = None,
        timeout_s: float = 120.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        super().__init__(on_message)
        self.url = check_upstream_url(url)
        self.display_url = redact(url)
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.timeout = httpx2.Timeout(connect_timeout_s, read=timeout_s)
        self.session_id: str | None = None
        self.protocol_version: str | None = None  # negotiated by initialize (2025 era)
        self.get_stream = "not opened"  # the server-initiated GET SSE stream, for diagnostics
        self.reinitialized = 0  # sessions re-established after a 404
        self._client: httpx2.AsyncClient | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._queue, self._queue_out = anyio.create_memory_object_stream[Message](SEND_QUEUE)
        self._in_flight: dict[Any, anyio.CancelScope] = {}
        self._modern_ids: set[Any] = set()  # in-flight requests sent with a 2026 envelope
        self._initialize: Message | None = None  # the host's initialize params, for a 404
        self._reinit_lock = anyio.Lock()
        self._param_maps: dict[str, dict[tuple[str, ...], str]] = {}  # tool -> Mcp-Param-*
        self._why_closed = "the proxy is shutting down"

    # -- Upstream surface -----------------------------------------------------------------
    async def send(self, message: Message) -> None:
        if self.closed.is_set():
            raise self.exited()
        await self._queue.send(message)

    def exited(self) -> ServerExited:
        return RemoteUpstreamClosed(self.display_url, self._why_closed)

    def describe(self) -> str:
        return "(remote upstream: no sandbox, no tracing)"

    async def run(self) -> None:
        """Write messages in order until cancelled; then DELETE the session (bounded)."""
        try:
            async with (
                httpx2.AsyncClient(timeout=self.timeout, follow_redirects=False) as client,
                anyio.create_task_group() as tg,
            ):
                self._client, self._tg = client, tg
                try:
                    async for message in self._queue_out:
                        await self._write(message)
                finally:
                    self.closed.set()
                    self.fail_pending(self.exited())
                    with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_S):
                        await self._terminate_session(client)
                    tg.cancel_scope.cancel()
        finally:
            self.closed.set()
            self._queue.close()
            self._queue_out.close()

    # -- writing ------------------------------------------------------------------------
    async def _write(self, message: Message) -> None:
        """Requests get their own task (a slow call never blocks the next message);
        notifications and responses are posted in order, as the SDK client does."""
        assert self._tg is not None
        method, request_id = message.get("method"), message.get("id")
        if method == "notifications/cancelled":
            params = message.get("params") or {}
            target = params.get("requestId") if isinstance(params, dict) else None
            scope = self._in_flight.get(target)
            if scope is not None and target in self._modern_ids:
                # 2026-07-28: closing the request's stream is the cancellation; that wire
                # has no client-to-server notifications. 2025: the notification is posted.
                scope.cancel()
                return
        if isinstance(method, str) and request_id is not None:
            if method == "initialize":
                params = message.get("params")
                self._initialize = params if isinstance(params, dict) else {}
                self.protocol_version = None
            scope = anyio.CancelScope()
            self._in_flight[request_id] = scope
            if _envelope_version(message):
                self._modern_ids.add(request_id)
            self._tg.start_soon(self._run_request, message, scope)
            return
        try:
            await self._exchange(message)
        except _Failed as exc:
            _log(f"the upstream did not take a {method or 'response'} message: {exc}")
        if method == "notifications/initialized" and self.session_id:
            self._tg.start_soon(self._listen_get)

    async def _run_request(self, message: Message, scope: anyio.CancelScope) -> None:
        request_id = message["id"]
        try:
            with scope:
                await self._exchange(message, may_reinitialize=True)
        except _Failed as exc:
            await self.deliver(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": exc.code, "message": f"mtguard: {exc}"},
                }
            )
        finally:
            if self._in_flight.get(request_id) is scope:
                del self._in_flight[request_id]
                self._modern_ids.discard(request_id)

    def _headers_for(self, message: Message) -> dict[str, str]:
        headers = {
            **self.headers,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "accept-encoding": "identity",
        }
        method = message.get("method")
        if self.session_id and method != "initialize":  # initialize opens a new session
            headers[MCP_SESSION_ID] = self.session_id
        envelope = _envelope_version(message)
        version = envelope or (None if method == "initialize" else self.protocol_version)
        if version:
            headers[MCP_PROTOCOL_VERSION_HEADER] = version
        if envelope and isinstance(method, str):  # 2026-07-28: routing headers mirror the body
            headers[MCP_METHOD_HEADER] = method
            params = message.get("params") or {}
            key = NAME_BEARING_METHODS.get(method)
            name = params.get(key) if key and isinstance(params, dict) else None
            if isinstance(name, str):
                headers[MCP_NAME_HEADER] = encode_header_value(name)
                arguments = params.get("arguments")
                if method == "tools/call" and isinstance(arguments, dict):
                    headers.update(mcp_param_headers(self._param_maps.get(name, {}), arguments))
        return headers

    def _timeout_for(self, message: Message) -> httpx2.Timeout:
        if message.get("method") == "subscriptions/listen":  # open until the host leaves
            return httpx2.Timeout(self.timeout.connect, read=None)
        return self.timeout

    # -- one exchange -------------------------------------------------------------------
    async def _exchange(self, message: Message, *, may_reinitialize: bool = False) -> None:
        """POST one message and deliver what comes back; `_Failed` says what went wrong."""
        assert self._client is not None
        sent_session = self.session_id
        try:
            async with self._client.stream(
                "POST",
                self.url,
                content=json.dumps(message).encode(),
                headers=self._headers_for(message),
                timeout=self._timeout_for(message),
            ) as response:
                expired = (
                    response.status_code == 404
                    and sent_session is not None
                    and message.get("method") != "initialize"
                )
                if not (expired and may_reinitialize):
                    await self._answer(message, response, expired=expired)
                    return
        except httpx2.ConnectError as exc:
            raise _Failed(
                f"cannot connect to the upstream {self.display_url}: {exc or 'refused'}"
            ) from exc
        except httpx2.TimeoutException as exc:
            raise _Failed(
                f"the upstream {self.display_url} did not answer within "
                f"{self.timeout_s:g} s ({type(exc).__name__})"
            ) from exc
        except httpx2.SSEError as exc:
            raise _Failed(
                f"malformed SSE from the upstream {self.display_url}: {exc}", NOT_MCP
            ) from exc
        except httpx2.HTTPError as exc:
            raise _Failed(
                f"HTTP error talking to the upstream {self.display_url}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        await self._reinitialize(sent_session)
        await self._exchange(message)

    async def _answer(self, message: Message, response: httpx2.Response, *, expired: bool) -> None:
        status = response.status_code
        request_id = message.get("id")
        is_request = "method" in message and request_id is not None
        if 300 <= status < 400:
            where = response.headers.get("location", "?")
            raise _Failed(
                f"the upstream redirected (HTTP {status}) to {redact(where)}; "
                "redirects are not followed: use that URL as --upstream if it is "
                "the intended server",
                NOT_MCP,
            )
        if status in (401, 403):
            raise _Failed(
                f"the upstream {self.display_url} refused the request (HTTP {status}"
                "): give it credentials with --upstream-header or $"
                f"{TOKEN_ENV}",
                NOT_MCP,
            )
        if status >= 400:
            error = await self._jsonrpc_error(response)
            if error is not None and is_request:
                await self.deliver({"jsonrpc": "2.0", "id": request_id, "error": error})
                return
            why = " (its session expired and could not be re-established)" if expired else ""
            raise _Failed(f"the upstream {self.display_url} answered HTTP {status}{why}", NOT_MCP)
        if not is_request:
            return  # a notification or response: 202 (or any 2xx) is all there is
        if status == 202:
            raise _Failed(
                "the upstream answered a request with 202 Accepted and no response", NOT_MCP
            )
        if message.get("method") == "initialize" and (sid := response.headers.get(MCP_SESSION_ID)):
            old, self.session_id = self.session_id, sid
            if old and old != sid and self._client is not None and self._tg is not None:
                # another host initialize (one upstream per listener): end the orphaned one
                self._tg.start_soon(self._delete_session, self._client, old)
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind == "application/json":
            body = await _read_bounded(response)
            await self._received(message, _parse(body, "JSON body"))
        elif kind == "text/event-stream":
            async with _events(response) as events:
                async for sse in events:
                    if sse.event != "message" or not sse.data:
                        continue  # a priming event (resumability) or another kind: not relayed
                    got = _parse(sse.data.encode(), "SSE event")
                    if "method" not in got:
                        await self._received(message, got)
                        return
                    await self.deliver(got)  # a notification or request sent meanwhile
            raise _Failed("the upstream's SSE stream ended without a response", NOT_MCP)
        else:
            raise _Failed(
                f"the upstream {self.display_url} answered Content-Type "
                f"{kind or 'none'!r}, neither JSON nor SSE: is it an MCP endpoint?",
                NOT_MCP,
            )

    async def _received(self, request: Message, response: Message) -> None:
        """The response to `request`: learn what it negotiates or lists, then deliver it."""
        if "method" in response:
            raise _Failed("the upstream answered a request with a notification", NOT_MCP)
        response = {**response, "id": request["id"]}
        result = response.get("result")
        if isinstance(result, dict):
            method = request.get("method")
            if method == "initialize" and isinstance(result.get("protocolVersion"), str):
                self.protocol_version = result["protocolVersion"]
            elif method == "tools/list" and isinstance(result.get("tools"), list):
                for tool in result["tools"]:
                    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
                    if isinstance(tool, dict) and find_invalid_x_mcp_header(schema) is None:
                        self._param_maps[str(tool.get("name"))] = x_mcp_header_map(schema)
        await self.deliver(response)

    async def _jsonrpc_error(self, response: httpx2.Response) -> Message | None:
        if not response.headers.get("content-type", "").lower().startswith("application/json"):
            return None
        try:
            body = json.loads(await _read_bounded(response))
        except (ValueError, _Failed):
            return None
        error = body.get("error") if isinstance(body, dict) else None
        return error if isinstance(error, dict) and "code" in error else None

    async def _reinitialize(self, stale: str | None) -> None:
        """The server forgot our session: run the host's initialize again (once per expiry)."""
        async with self._reinit_lock:
            if self.session_id != stale:
                return  # another request already re-established it
            self.session_id = None
            if self._initialize is None:
                raise _Failed("the upstream session expired (HTTP 404) before any initialize")
            self.reinitialized += 1
            request_id = f"mtguard-reinitialize-{self.reinitialized}"
            slot = self.expect(request_id)
            try:
                await self._exchange(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "initialize",
                        "params": self._initialize,
                    }
                )
                response = await slot.wait()
            finally:
                self.forget(request_id)
            if "error" in response or not self.session_id:
                raise _Failed(
                    "the upstream session expired (HTTP 404) and re-initializing "
                    f"failed: {response.get('error') or 'no session id returned'}"
                )
            await self._exchange({"jsonrpc": "2.0", "method": "notifications/initialized"})
            _log(f"the upstream session expired; re-initialized ({self.reinitialized})")

    async def _listen_get(self) -> None:
        """The optional GET stream for server-initiated messages (405: the server has none)."""
        assert self._client is not None
        headers = self._headers_for({})
        headers["accept"] = "text/event-stream"
        try:
            async with self._client.stream(
                "GET",
                self.url,
                headers=headers,
                timeout=httpx2.Timeout(self.timeout.connect, read=None),
            ) as response:
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if response.status_code == 405:
                    self.get_stream = "not offered (HTTP 405)"
                    return
                if response.status_code != 200 or kind != "text/event-stream":
                    self.get_stream = f"refused (HTTP {response.status_code}, {kind or 'no type'})"
                    _log(f"the upstream's GET stream was {self.get_stream}")
                    return
                self.get_stream = "open"
                async with _events(response) as events:
                    async for sse in events:
                        if sse.event == "message" and sse.data:
                            await self.deliver(_parse(sse.data.encode(), "GET stream event"))
                self.get_stream = "ended by the server"
        except (httpx2.HTTPError, _Failed) as exc:
            self.get_stream = f"lost: {exc}"
            _log(f"the upstream's GET stream was {self.get_stream}")

    async def _terminate_session(self, client: httpx2.AsyncClient) -> None:
        if self.session_id:
            await self._delete_session(client, self.session_id)
            self.session_id = None

    async def _delete_session(self, client: httpx2.AsyncClient, session_id: str) -> None:
        headers = {**self._headers_for({}), MCP_SESSION_ID: session_id}
        try:
            await client.delete(self.url, headers=headers)
        except httpx2.HTTPError as exc:
            _log(f"could not end the upstream session: {type(exc).__name__}")


@dataclass
class Event:
    event: str = "message"
    data: str = ""


@asynccontextmanager
async def _events(response: httpx2.Response) -> AsyncIterator[AsyncIterator[Event]]:
    """The response's server-sent events (WHATWG parsing), read from the raw stream so that
    leaving early closes every generator below (httpx2's decoders would be left to the GC)."""
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        raise _Failed("the upstream compressed its SSE stream although asked not to", NOT_MCP)

    async def parse(raw: AsyncIterator[bytes]) -> AsyncGenerator[Event, None]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending, kind, size = "", "", 0
        data: list[str] = []
        async for chunk in raw:
            pending += decoder.decode(chunk)
            *lines, pending = re.split(r"\r\n|\r(?!$)|\n", pending)
            for line in lines:
                if not line:  # a blank line dispatches the event
                    if data:
                        yield Event(kind or "message", "\n".join(data))
                    kind, data, size = "", [], 0
                    continue
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    data.append(value)
                    size += len(value)
                    if size > MAX_RESPONSE_BYTES:
                        raise _Failed(f"an SSE event over {MAX_RESPONSE_BYTES} bytes", NOT_MCP)
                elif name == "event":
                    kind = value
            if len(pending) > MAX_RESPONSE_BYTES:
                raise _Failed(f"an SSE line over {MAX_RESPONSE_BYTES} bytes", NOT_MCP)

    async with aclosing(response.aiter_raw()) as raw:
        try:
            async with aclosing(parse(raw)) as events:
                yield events
        finally:
            await _unwind(raw)


async def _read_bounded(response: httpx2.Response) -> bytes:
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        return await response.aread()  # decoded by httpx2 (unbounded, but only on request)
    body = bytearray()
    async with aclosing(response.aiter_raw()) as raw:
        async for chunk in raw:
            body += chunk
            if len(body) > MAX_RESPONSE_BYTES:
                await _unwind(raw)
                raise _Failed(f"the upstream's answer is over {MAX_RESPONSE_BYTES} bytes", NOT_MCP)
    return bytes(body)


async def _unwind(raw: AsyncGenerator[bytes, None]) -> None:
    """Finish a body iterator we stop reading early. httpx2's transport stream iterates the
    connection pool's generator without closing it, so closing ours would leave that one to
    the garbage collector; a cancelled read instead ends every generator in the chain."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        with contextlib.suppress(StopAsyncIteration, httpx2.HTTPError):
            while True:
                await raw.__anext__()


def _parse(data: bytes, what: str) -> Message:
    try:
        message = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Failed(
            f"the upstream sent a {what} that is not JSON ({data[:80]!r}): not an MCP server?",
            NOT_MCP,
        ) from exc
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise _Failed(
            f"the upstream sent a {what} that is not a JSON-RPC 2.0 message "
            f"({data[:80]!r}): not an MCP server?",
            NOT_MCP,
        )
    return message


# -- the guard's side ---------------------------------------------------------------------
class _RemoteWindow:
    """The monitor window of a call to a remote server: nothing to trace, and it says so."""

    def __init__(self, call: DeclaredCall) -> None:
        self.tree = BehaviorTree(
            call=call, traced=False, complete=False, incomplete_reasons=[REMOTE_REASON]
        )

    def response_arrived(self) -> None:
        pass

    def terminate(self, offender: int, rule: str) -> list[int]:
        return []


class RemoteWatch:
    """The `Watch` for a remote upstream: every tree is untraced (`traced=False`)."""

    @asynccontextmanager
    async def window(self, call: DeclaredCall, on_event: Any = None) -> AsyncIterator[Any]:
        yield _RemoteWindow(call)

    def consent(self, paths: Any) -> AbstractContextManager[list[str]]:
        return nullcontext([])  # no kernel side: nothing is killed on touch


@asynccontextmanager
async def open_remote(
    guard: Guard,
    url: str,
    name: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    on_message: Callable[[Message], Awaitable[None]] | None = None,
) -> AsyncIterator[GuardedServer]:
    """A `GuardedServer` for a streamable HTTP server at `url` (no sandbox, no monitor). The
    host's own initialize is relayed (as `guard.connect(handshake=False)`)."""
    from ..guard import GuardedServer
    from ..supervisor import Supervisor

    name = guard._unique(name or remote_name(check_upstream_url(url)))
    upstream = HttpUpstream(
        url, headers=headers, on_message=on_message, timeout_s=guard.config.call_timeout_s
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(upstream.run)
        sup = Supervisor(
            name=name,
            upstream=upstream,
            engine=guard.engine,
            pins=guard.pins,
            watch=RemoteWatch(),
            sink=guard.sink,
            tools_by_server=guard.tools_by_server,
            canaries={},
            observe=guard.observe,
            default_task=guard.config.task,
            call_timeout_s=guard.config.call_timeout_s,
            dispatch_hook=guard.dispatch_hook,
            route=guard.servers.get,
            online="off",  # nothing is observed, so nothing can be stopped mid-call
        )
        sup.peers = guard.session  # the agent session, as for a sandboxed server
        guard.servers[name] = sup
        try:
            yield GuardedServer(sup, upstream)
        finally:
            guard.servers.pop(name, None)
            tg.cancel_scope.cancel()


def connect_server(
    guard: Guard,
    command: list[str],
    name: str | None,
    on_message: Callable[[Message], Awaitable[None]],
    upstream_url: str | None = None,
    upstream_headers: Mapping[str, str] | None = None,
) -> AbstractAsyncContextManager[GuardedServer]:
    """What both proxy fronts relay to: the URL's server, else `command` in a sandbox."""
    if upstream_url is not None:
        return open_remote(
            guard, upstream_url, name, headers=upstream_headers, on_message=on_message
        )
    return guard.connect(command, name, handshake=False, on_message=on_message)


__all__ = [
    "REMOTE_REASON",
    "HttpUpstream",
    "RemoteUpstreamClosed",
    "RemoteWatch",
    "check_upstream_url",
    "connect_server",
    "open_remote",
    "parse_header",
    "redact",
    "upstream_headers",
]
