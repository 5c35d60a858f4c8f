"""The streamable HTTP front end's checks and framing, over real sockets, with a scripted relay."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx
import mcp_types as types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.shared.message import SessionMessage
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import HEADER_MISMATCH

from mtguard_rt.config import GuardConfig
from mtguard_rt.errors import GuardError
from mtguard_rt.proxy.http import HttpFront, Router, parse_listen, serve_http

pytestmark = pytest.mark.anyio

JSON_AND_SSE = {"accept": "application/json, text/event-stream"}
MODERN = {"mcp-protocol-version": "2026-07-28"}  # sessionless: no Mcp-Session-Id needed


class ScriptedRelay:
    """Answers every request with its method; a listen request stays open until `finish()`."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.seen: list[dict[str, Any]] = []
        self.listening = anyio.Event()
        self.listen_id: Any = None
        self.slow_seen = anyio.Event()

    async def emit(self, message: dict[str, Any]) -> None:
        parsed = types.jsonrpc_message_adapter.validate_python(message)
        await self.router.send(SessionMessage(parsed))

    async def from_host(self, message: dict[str, Any], tg: anyio.abc.TaskGroup) -> None:
        self.seen.append(message)
        if message.get("method") == "subscriptions/listen":
            self.listen_id = message["id"]
            self.listening.set()
        elif message.get("method") == "slow/op":
            self.slow_seen.set()  # never answered: the client waits until its session ends
        elif message.get("method") == "initialize" and message["params"].get("refuse"):
            await self.emit({"jsonrpc": "2.0", "id": message["id"],
                             "error": {"code": -32602, "message": "refused"}})
        elif "method" in message and message.get("id") is not None:
            await self.emit({"jsonrpc": "2.0", "id": message["id"],
                             "result": {"method": message["method"]}})

    async def finish(self) -> None:
        await self.emit({"jsonrpc": "2.0", "id": self.listen_id, "result": {}})


Front = tuple[str, ScriptedRelay]


@asynccontextmanager
async def front(**options: Any) -> AsyncIterator[Front]:
    router = Router()
    relay = ScriptedRelay(router)
    options = {"loopback": True, "token": None, "allowed_origins": (), **options}
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        front = HttpFront(relay, router, tg, response_timeout_s=5, **options)  # type: ignore[arg-type]
        tg.start_soon(listener.serve, front.handle)
        try:
            yield f"http://127.0.0.1:{port}/mcp", relay
        finally:
            tg.cancel_scope.cancel()


def rpc(method: str, request_id: Any = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def post(url: str, body: Any, *, modern: bool = True, **headers: str) -> httpx.Response:
    """POST one message; `modern` marks it 2026-07-28 (no session needed) by its header."""
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as client:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return await client.post(url, content=content, headers={
                "content-type": "application/json", **JSON_AND_SSE,
                **(MODERN if modern else {}), **headers})


async def test_requests_are_relayed_and_answered_with_their_own_ids() -> None:
    async with front() as (url, relay):
        async with anyio.create_task_group() as tg:
            answers: dict[str, httpx.Response] = {}

            async def one(tag: str) -> None:
                answers[tag] = await post(url, rpc("tools/list", request_id=7))

            for tag in ("a", "b"):  # two clients using the same JSON-RPC id at once
                tg.start_soon(one, tag)
        text = await post(url, rpc("ping", request_id="abc"))
    for response in answers.values():
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {"jsonrpc": "2.0", "id": 7, "result": {"method": "tools/list"}}
    assert text.json()["id"] == "abc"
    proxy_ids = [m["id"] for m in relay.seen]
    assert len(set(proxy_ids)) == 3 and all(i.startswith("mtguard-http-") for i in proxy_ids)


async def test_sse_only_clients_get_one_event_and_notifications_get_202() -> None:
    async with front() as (url, relay):
        sse = await post(url, rpc("tools/list"), accept="text/event-stream")
        note = await post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert sse.status_code == 200 and sse.headers["content-type"] == "text/event-stream"
    event, data = sse.text.strip().split("\n")
    assert event == "event: message"
    assert json.loads(data.removeprefix("data: "))["result"] == {"method": "tools/list"}
    assert (note.status_code, note.text) == (202, "")
    assert relay.seen[-1] == {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"origin": "https://evil.example"}, 403),
        ({"origin": "http://localhost:3000"}, 200),
        ({"origin": "http://127.0.0.1"}, 200),
        ({"host": "evil.example:8080"}, 421),  # DNS rebinding: a public name on loopback
    ],
)
async def test_origin_and_host_are_checked_on_loopback(
    headers: dict[str, str], status: int
) -> None:
    async with front() as (url, relay):
        response = await post(url, rpc("tools/list"), **headers)
    assert response.status_code == status
    assert len(relay.seen) == (1 if status == 200 else 0)


async def test_listed_origins_are_allowed() -> None:
    async with front(allowed_origins=["https://app.example"]) as (url, _):
        assert (await post(url, rpc("ping"), origin="https://app.example")).status_code == 200
        assert (await post(url, rpc("ping"), origin="https://other.example")).status_code == 403


async def test_bearer_token_is_required_when_configured() -> None:
    async with front(loopback=False, token="s3cret-token") as (url, relay):
        missing = await post(url, rpc("ping"))
        wrong = await post(url, rpc("ping"), authorization="Bearer nope")
        right = await post(url, rpc("ping"), authorization="Bearer s3cret-token")
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 200 and len(relay.seen) == 1


@pytest.mark.parametrize(
    ("headers", "what"),
    [
        ({"mcp-method": "tools/list"}, "Mcp-Method"),
        ({"mcp-method": "tools/call", "mcp-name": "read_notes"}, "Mcp-Name"),
        ({"mcp-protocol-version": "2025-11-25"}, "MCP-Protocol-Version"),
    ],
)
async def test_routing_headers_must_match_the_body(headers: dict[str, str], what: str) -> None:
    body = rpc("tools/call", name="delete_files", arguments={},
               _meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"})
    async with front() as (url, relay):
        bad = await post(url, body, **headers)
        good = await post(url, body, **{"mcp-method": "tools/call", "mcp-name": "delete_files",
                                        "mcp-protocol-version": "2026-07-28"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == HEADER_MISMATCH and what in bad.json()["error"]["message"]
    assert good.status_code == 200
    assert [m["params"]["name"] for m in relay.seen] == ["delete_files"]  # only the good one


@pytest.mark.parametrize(
    ("send", "status", "code"),
    [
        (lambda url: post(url, b"{not json"), 400, -32700),
        (lambda url: post(url, [rpc("ping")]), 400, -32600),  # batches are gone from MCP
        (lambda url: post(url, rpc("ping"), **{"content-type": "text/plain"}), 415, -32600),
        (lambda url: post(url, rpc("ping"), accept="text/html"), 406, -32600),
        (lambda url: post(url.replace("/mcp", "/other"), rpc("ping")), 404, -32600),
    ],
)
async def test_malformed_requests_get_an_http_error(
    send: Callable[[str], Any], status: int, code: int
) -> None:
    async with front() as (url, relay):
        response = await send(url)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert relay.seen == []


async def test_other_methods_are_refused() -> None:
    async with front() as (url, _), httpx.AsyncClient() as client:
        with anyio.fail_after(10):
            put = await client.put(url, content=b"{}")
            plain_get = await client.get(url, headers={"accept": "application/json"})
    assert put.status_code == 405 and "DELETE" in put.headers["allow"]
    assert plain_get.status_code == 406


async def _open_sse(url: str, method: str, body: dict[str, Any] | None = None,
                    extra: str = "",
                    ) -> tuple[anyio.abc.SocketStream, BufferedByteReceiveStream, str]:
    """A raw SSE request: the status line and headers read, events left to `_event`."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    stream = await anyio.connect_tcp("127.0.0.1", port)
    data = json.dumps(body).encode() if body else b""
    await stream.send(
        f"{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    reader = BufferedByteReceiveStream(stream)
    head = (await reader.receive_until(b"\r\n\r\n", 65536)).decode()
    return stream, reader, head


async def _event(reader: BufferedByteReceiveStream) -> dict[str, Any]:
    event = (await reader.receive_until(b"\n\n", 65536)).decode()
    data = next(line for line in event.split("\n") if line.startswith("data: "))
    return dict(json.loads(data.removeprefix("data: ")))


async def test_list_changed_reaches_listen_and_get_streams() -> None:
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    async with front() as (url, relay):
        with anyio.fail_after(15):
            session = (await post(url, rpc("initialize", 0), modern=False)
                       ).headers["mcp-session-id"]
            listen, listen_events, listen_head = await _open_sse(
                url, "POST", rpc("subscriptions/listen", 5), "MCP-Protocol-Version: 2026-07-28\r\n")
            get, get_events, get_head = await _open_sse(
                url, "GET", extra=f"Mcp-Session-Id: {session}\r\n")
            async with listen, get:
                assert "content-type: text/event-stream" in listen_head.lower()
                assert "content-type: text/event-stream" in get_head.lower()
                await relay.listening.wait()
                assert relay.listen_id.startswith("mtguard-http-")
                # the server tags listen-stream frames with the listen request's (our) id
                tag = {SUBSCRIPTION_ID_META_KEY: relay.listen_id}
                await relay.emit({**changed, "params": {"_meta": tag}})
                await relay.emit(changed)  # a bare one (2025-era servers): GET streams
                got_listen = await _event(listen_events)
                got_get = await _event(get_events)
                await relay.finish()
                final = await _event(listen_events)
                with pytest.raises(anyio.EndOfStream):  # the listen stream ends with its answer
                    await listen_events.receive()
    # the client sees its own id in the tag and in the answer
    assert got_listen == {**changed, "params": {"_meta": {SUBSCRIPTION_ID_META_KEY: 5}}}
    assert got_get == changed
    assert final == {"jsonrpc": "2.0", "id": 5, "result": {}}


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("8765", "localhost:", "host:99999", ":80"):
        with pytest.raises(GuardError, match="--listen wants HOST:PORT"):
            parse_listen(bad)


async def test_non_loopback_without_a_token_refuses_to_start() -> None:
    with pytest.raises(GuardError, match="not loopback: set a bearer token"):
        await serve_http(GuardConfig(), ["true"], host="0.0.0.0", port=0)


# -- sessions (2025 era) and routing headers ----------------------------------------------
async def test_initialize_issues_a_session_that_later_requests_must_carry() -> None:
    async with front() as (url, relay):
        opened = await post(url, rpc("initialize", 1), modern=False)
        session = opened.headers["mcp-session-id"]
        other = (await post(url, rpc("initialize", 1), modern=False)).headers["mcp-session-id"]
        missing = await post(url, rpc("tools/list", 2), modern=False)
        unknown = await post(url, rpc("tools/list", 3), modern=False,
                             **{"mcp-session-id": "f" * 32})
        good = await post(url, rpc("tools/list", 4), modern=False,
                          **{"mcp-session-id": session})
        note = await post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                          modern=False, **{"mcp-session-id": session})
        again = await post(url, rpc("initialize", 5), modern=False,
                           **{"mcp-session-id": session})
        refused = await post(url, rpc("initialize", 6, refuse=True), modern=False)
    assert opened.status_code == 200 and len(session) == 32 and other != session
    assert missing.status_code == 400 and "Mcp-Session-Id header is required" in (
        missing.json()["error"]["message"])
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == -32001
    assert good.status_code == 200 and good.json()["result"] == {"method": "tools/list"}
    assert note.status_code == 202
    assert again.status_code == 400 and "without Mcp-Session-Id" in again.text
    assert refused.status_code == 200 and "mcp-session-id" not in refused.headers
    relayed = [m.get("method") for m in relay.seen]
    assert relayed == ["initialize", "initialize", "tools/list", "notifications/initialized",
                       "initialize"]  # nothing without a valid session was relayed


async def test_delete_ends_the_session_and_releases_its_streams_and_calls() -> None:
    async with front() as (url, relay), httpx.AsyncClient() as client:
        with anyio.fail_after(15):
            session = (await post(url, rpc("initialize", 1), modern=False)
                       ).headers["mcp-session-id"]
            get, events, head = await _open_sse(
                url, "GET", extra=f"Mcp-Session-Id: {session}\r\n")
            pending: dict[str, httpx.Response] = {}

            async def slow() -> None:
                pending["slow"] = await post(url, rpc("slow/op", 9), modern=False,
                                             **{"mcp-session-id": session})

            async with get, anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await relay.slow_seen.wait()
                deleted = await client.delete(url, headers={"mcp-session-id": session})
                with pytest.raises(anyio.EndOfStream):  # its GET stream is closed
                    await events.receive()
            after = await post(url, rpc("tools/list", 2), modern=False,
                               **{"mcp-session-id": session})
            twice = await client.delete(url, headers={"mcp-session-id": session})
            bare = await client.delete(url)
    assert "200 OK" in head and deleted.status_code == 204
    assert pending["slow"].json()["error"]["code"] == -32800  # answered at once, not timed out
    slow_id = next(m["id"] for m in relay.seen if m.get("method") == "slow/op")
    assert {"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": slow_id, "reason": "the HTTP session was ended"}
            } in relay.seen
    assert after.status_code == 404 and twice.status_code == 404
    assert bare.status_code == 400


async def test_get_needs_a_session() -> None:
    async with front() as (url, _), httpx.AsyncClient() as client:
        with anyio.fail_after(10):
            response = await client.get(url, headers={"accept": "text/event-stream"})
    assert response.status_code == 400 and "Mcp-Session-Id" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "what"),
    [
        ([("mcp-method", "tools/call")], "needs an Mcp-Name header"),
        ([("mcp-method", "tools/call"), ("mcp-name", "=?base64?bm9wZQ==?=")], "Mcp-Name"),
        ([("mcp-method", "tools/call"), ("mcp-method", "tools/call"),
          ("mcp-name", "delete_files")], "appears more than once"),
        ([("mcp-method", "prompts/get"), ("mcp-name", "delete_files")], "Mcp-Method"),
    ],
)
async def test_draft_routing_headers_need_a_name_and_no_duplicates(
    headers: list[tuple[str, str]], what: str
) -> None:
    body = rpc("tools/call", name="delete_files", arguments={})
    async with front() as (url, relay), httpx.AsyncClient() as client:
        with anyio.fail_after(10):
            bad = await client.post(url, content=json.dumps(body).encode(), headers=[
                ("content-type", "application/json"), *JSON_AND_SSE.items(), *MODERN.items(),
                *headers])
            encoded = await post(url, body, **{"mcp-method": "tools/call",
                                               "mcp-name": "=?base64?ZGVsZXRlX2ZpbGVz?="})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == HEADER_MISMATCH and what in bad.json()["error"]["message"]
    assert encoded.status_code == 200  # a base64-wrapped name that decodes to the body's
    assert len(relay.seen) == 1
