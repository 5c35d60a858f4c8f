"""`HttpUpstream` against a real SDK streamable HTTP server and against broken endpoints, on
loopback: session id and protocol headers, JSON and SSE answers, an expired session, and a clear
error for each way an upstream can fail."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream

from mtguard_rt.cli import main as cli_main
from mtguard_rt.errors import GuardError
from mtguard_rt.proxy.remote import (
    HttpUpstream,
    check_upstream_url,
    parse_header,
    redact,
    upstream_headers,
)
from mtguard_rt.proxy.upstream import Message, UpstreamError

from .mcp_http_server import run_server

pytestmark = pytest.mark.anyio

INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"},
}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
}


Inbox = MemoryObjectReceiveStream[Message]


@asynccontextmanager
async def upstream(url: str, **options: Any) -> AsyncIterator[tuple[HttpUpstream, Inbox]]:
    """A running `HttpUpstream`; what it hands to `on_message` arrives in the inbox."""
    send, inbox = anyio.create_memory_object_stream[Message](100)
    up = HttpUpstream(url, on_message=send.send, **options)
    async with send, inbox, anyio.create_task_group() as tg:
        tg.start_soon(up.run)
        try:
            yield up, inbox
        finally:
            tg.cancel_scope.cancel()


async def handshake(up: HttpUpstream) -> Message:
    result = await up.request("initialize", INIT, 10)
    await up.notify("notifications/initialized")
    return result


@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_a_2025_session_carries_its_id_and_version_and_ends_with_delete(
    json_response: bool,
) -> None:
    with run_server(json_response=json_response) as server:
        with anyio.fail_after(30):
            async with upstream(server.url) as (up, _):
                result = await handshake(up)
                tools = await up.request("tools/list", None, 10)
                echoed = await up.request(
                    "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, 10
                )
                session = up.session_id
    assert result["protocolVersion"] == "2025-11-25"
    assert {t["name"] for t in tools["tools"]} == {"echo", "read_file", "swap"}
    assert echoed["content"][0]["text"] == "hi"
    first, *later = server.seen.requests
    assert first == {"verb": "POST"}  # initialize: no session yet, no version header
    assert session is not None and later
    for request in later:
        assert request["mcp-session-id"] == session
        assert request["mcp-protocol-version"] == "2025-11-25"
    assert later[-1]["verb"] == "DELETE"  # the session is ended on close
    assert "GET" in {r["verb"] for r in later}  # the server-initiated stream was opened


async def test_2026_requests_carry_the_routing_headers_and_no_session() -> None:
    with run_server() as server:
        with anyio.fail_after(30):
            async with upstream(server.url) as (up, _):
                await up.request("server/discover", {"_meta": MODERN_META}, 10)
                called = await up.request(
                    "tools/call",
                    {"name": "echo", "arguments": {"text": "x"}, "_meta": MODERN_META},
                    10,
                )
    assert called["content"][0]["text"] == "x"
    assert server.seen.requests == [
        {"verb": "POST", "mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"},
        {
            "verb": "POST",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "echo",
        },
    ]


async def test_a_session_the_server_forgot_is_reinitialized_once() -> None:
    with run_server() as server:
        with anyio.fail_after(30):
            async with upstream(server.url) as (up, _):
                await handshake(up)
                old = up.session_id
                assert old is not None
                async with httpx.AsyncClient() as raw:  # the server ends the session
                    gone = await raw.delete(server.url, headers={"mcp-session-id": old})
                listed = await up.request("tools/list", None, 10)
                new = up.session_id
    assert gone.status_code in (200, 204)
    assert "tools" in listed and new not in (None, old) and up.reinitialized == 1


async def test_a_second_initialize_ends_the_orphaned_session() -> None:
    with run_server() as server:
        with anyio.fail_after(30):
            async with upstream(server.url) as (up, _):
                await handshake(up)
                first = up.session_id
                await handshake(up)  # a second host session on one listener
                second = up.session_id
                await up.request("tools/list", None, 10)
    deletes = [r["mcp-session-id"] for r in server.seen.requests if r["verb"] == "DELETE"]
    assert first != second and deletes == [first, second]


async def test_list_changed_and_other_server_messages_reach_on_message() -> None:
    with run_server() as server:
        with anyio.fail_after(30):
            async with upstream(server.url) as (up, inbox):
                await handshake(up)
                await up.request("tools/call", {"name": "swap", "arguments": {}}, 10)
                async for message in inbox:  # on the GET stream or the call's SSE stream
                    if message.get("method") == "notifications/tools/list_changed":
                        break
    assert up.get_stream in ("open", "ended by the server")


# -- broken upstreams -------------------------------------------------------------------------
Reply = Callable[[bytes], Awaitable[bytes | None]]


@asynccontextmanager
async def fake_endpoint(reply: Reply) -> AsyncIterator[str]:
    """A loopback HTTP endpoint that answers every request with `reply(body)` (None: never)."""

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            try:
                head = (await reader.receive_until(b"\r\n\r\n", 65536)).decode("latin-1")
                length = next(
                    (
                        int(line.split(":")[1])
                        for line in head.split("\r\n")
                        if line.lower().startswith("content-length:")
                    ),
                    0,
                )
                body = await reader.receive_exactly(length) if length else b""
                answer = await reply(body)
                if answer is None:
                    await anyio.sleep_forever()
                else:
                    await stream.send(answer)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead):
                pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            tg.cancel_scope.cancel()


def http(status: str, kind: str, body: bytes, *extra: str) -> bytes:
    head = [
        f"HTTP/1.1 {status}",
        f"Content-Type: {kind}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def canned(answer: bytes | None) -> Reply:
    async def reply(body: bytes) -> bytes | None:
        return answer

    return reply


def sse_answering(data: str) -> Reply:
    async def reply(body: bytes) -> bytes | None:
        return http("200 OK", "text/event-stream", data.encode())

    return reply


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            canned(http("200 OK", "text/html", b"<html>hello</html>")),
            "answered Content-Type 'text/html', neither JSON nor SSE: is it an MCP endpoint?",
        ),
        (
            canned(http("200 OK", "application/json", b'{"hello": "world"}')),
            "not a JSON-RPC 2.0 message",
        ),
        (canned(http("200 OK", "application/json", b"{not json")), "JSON body that is not JSON"),
        (sse_answering("event: message\ndata: {broken\n\n"), "SSE event that is not JSON"),
        (sse_answering(": keepalive only\n\n"), "SSE stream ended without a response"),
        (canned(http("500 Internal Server Error", "text/plain", b"boom")), "answered HTTP 500"),
        (
            canned(
                http(
                    "307 Temporary Redirect",
                    "text/plain",
                    b"",
                    "Location: http://127.0.0.1:1/elsewhere",
                )
            ),
            "redirects are not followed",
        ),
        (canned(http("202 Accepted", "text/plain", b"")), "202 Accepted and no response"),
        (
            canned(http("401 Unauthorized", "text/plain", b"")),
            "refused the request (HTTP 401): give it credentials",
        ),
    ],
    ids=[
        "html",
        "json-not-rpc",
        "json-garbage",
        "sse-garbage",
        "sse-no-answer",
        "http-500",
        "redirect",
        "202",
        "401",
    ],
)
async def test_non_mcp_answers_become_clear_errors(reply: Reply, expected: str) -> None:
    async with fake_endpoint(reply) as url, upstream(url) as (up, _):
        with anyio.fail_after(15), pytest.raises(UpstreamError) as err:
            await up.request("tools/list", None, 10)
        assert not up.closed.is_set()  # errors are per request; the proxy keeps serving
    assert expected in err.value.message


async def test_a_server_without_a_get_stream_is_fine() -> None:
    """405 to the GET: noted, and the session goes on."""
    get_answered = anyio.Event()

    async def reply(body: bytes) -> bytes | None:
        if not body:  # the GET
            get_answered.set()
            return http("405 Method Not Allowed", "text/plain", b"")
        message = json.loads(body)
        if message.get("method") == "initialize":
            result = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "serverInfo": {"name": "x", "version": "0"},
                },
            }
            return http(
                "200 OK", "application/json", json.dumps(result).encode(), "Mcp-Session-Id: s-1"
            )
        if "id" in message:
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
            return http("200 OK", "application/json", json.dumps(answer).encode())
        return http("202 Accepted", "text/plain", b"")

    async with fake_endpoint(reply) as url, upstream(url) as (up, _):
        with anyio.fail_after(15):
            await handshake(up)
            await get_answered.wait()
            while up.get_stream == "not opened":  # until the upstream has read the 405
                await anyio.wait_all_tasks_blocked()
            assert up.get_stream == "not offered (HTTP 405)"
            assert await up.request("ping", None, 10) == {}
            assert up.session_id == "s-1"


async def test_a_json_rpc_error_body_at_an_error_status_is_passed_through() -> None:
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32601, "message": "no such"}}
    reply = canned(http("404 Not Found", "application/json", json.dumps(error).encode()))
    async with fake_endpoint(reply) as url, upstream(url) as (up, _):
        with anyio.fail_after(15), pytest.raises(UpstreamError) as err:
            await up.request("bogus/method", None, 10)
    assert (err.value.code, err.value.message) == (-32601, "no such")


async def test_a_silent_upstream_times_out_with_a_clear_error() -> None:
    async with fake_endpoint(canned(None)) as url, upstream(url, timeout_s=0.5) as (up, _):
        with anyio.fail_after(15), pytest.raises(UpstreamError) as err:
            await up.request("tools/list", None, 10)
    assert "did not answer within 0.5 s (ReadTimeout)" in err.value.message


async def test_connection_refused_is_a_clear_error_and_relayed_requests_get_it_too() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    async with upstream(url) as (up, inbox):
        with anyio.fail_after(15):
            with pytest.raises(UpstreamError) as err:
                await up.request("tools/list", None, 10)
            # a relayed host request (no slot) is answered through on_message
            await up.send({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": INIT})
            relayed = await inbox.receive()
    assert f"cannot connect to the upstream {url}" in err.value.message
    assert relayed["id"] == 7 and "cannot connect to the upstream" in relayed["error"]["message"]


async def test_credentials_are_sent_but_never_in_errors() -> None:
    secret = "tok-9b0c2f"
    with run_server(token=secret) as server:
        with anyio.fail_after(30):
            async with upstream(server.url) as (up, _):
                with pytest.raises(UpstreamError) as refused:
                    await up.request("initialize", INIT, 10)
            headers = upstream_headers([], {"MTGUARD_UPSTREAM_TOKEN": secret})
            async with upstream(server.url, headers=headers) as (up, _):
                await handshake(up)
    assert "HTTP 401" in refused.value.message and secret not in refused.value.message
    assert server.seen.requests[-1]["authorization"] == f"Bearer {secret}"


# -- arguments --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ws://127.0.0.1:1/mcp", "only http:// and https:// URLs are spoken"),
        ("file:///tmp/x", "only http:// and https:// URLs are spoken"),
        ("127.0.0.1:8000/mcp", "only http:// and https:// URLs are spoken"),
        ("http:///mcp", "has no host"),
        ("http://127.0.0.1:99999/mcp", "is not a valid URL"),
    ],
)
def test_non_http_urls_are_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(GuardError, match=why):
        check_upstream_url(url)


def test_headers_and_redaction() -> None:
    assert parse_header("Authorization: Bearer a:b") == ("Authorization", "Bearer a:b")
    for bad, why in (
        ("NoColon", "wants 'Name: value'"),
        ("Bad Name: x", "wants 'Name: value'"),
        ("Mcp-Session-Id: x", "sets this header itself"),
    ):
        with pytest.raises(GuardError, match=why):
            parse_header(bad)
    assert upstream_headers(["X-A: 1"], {"MTGUARD_UPSTREAM_TOKEN": "t"}) == {
        "X-A": "1",
        "Authorization": "Bearer t",
    }
    assert redact("http://user:pw@host:1/mcp") == "http://***@host:1/mcp"
    err = "wants 'Name: value'"
    with pytest.raises(GuardError, match=err) as info:
        parse_header("Bearer secret-value-here")
    assert "secret-value-here" not in str(info.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--upstream", "ftp://h/mcp"], "only http:// and https:// URLs"),
        (
            ["--upstream", "http://127.0.0.1:1/mcp", "--", "python", "s.py"],
            "either --upstream URL or -- SERVER_CMD",
        ),
        (["--upstream", "http://127.0.0.1:1/mcp", "--mount", "/tmp"], "configure the sandbox"),
        (["--upstream-header", "A: b", "--", "true"], "needs --upstream URL"),
    ],
)
def test_cli_refuses_bad_upstream_arguments(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["proxy", *argv]) == 2
    assert message in capsys.readouterr().err
