"""The official SDK client -> `mtguard proxy --upstream URL` -> a real streamable HTTP MCP server.

The upstream is the SDK's MCPServer under uvicorn on 127.0.0.1 (tests/proxy/mcp_http_server.py),
in JSON-response and SSE modes; the proxy is a subprocess, fronted by stdio (the SDK's stdio
client spawns it) or by `--listen` (the SDK's streamable HTTP client). Both protocol eras run:
2026-07-28 (`mode="auto"`: no session, routing headers) and 2025-11-25 (`mode="legacy"`:
initialize, Mcp-Session-Id). No Docker and no eBPF: a URL upstream has neither.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client, IncomingMessage
from mcp.client.streamable_http import streamable_http_client

from mtguard_rt.eval.mcp_client import McpToolClient, open_stdio_client
from mtguard_rt.model import AuditRecord
from mtguard_rt.proxy.remote import REMOTE_REASON
from tests.audit_records import call_records

from ..proxy.mcp_http_server import CANARY, Seen, run_server
from .conftest import MTGUARD
from .listening import listening_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]

SESSION_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20
SSH = "~/.ssh/id_rsa"
MODES = [("auto", "2026-07-28"), ("legacy", "2025-11-25")]


def records(path: Path) -> list[AuditRecord]:
    return call_records(path)


def calls(path: Path) -> list[AuditRecord]:
    return [r for r in records(path) if not r.call_id.endswith("tools/list")]


def text(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


def proxy_cmd(url: str, audit: Path, *flags: str) -> list[str]:
    return [MTGUARD, "proxy", "--audit-log", str(audit), *flags, "--upstream", url]


def check_wire(seen: Seen, version: str) -> None:
    """What reached the upstream: a 2025 session's id on every request after initialize (and
    a DELETE at the end), or 2026 routing headers and no session at all."""
    posts = [r for r in seen.requests if r["verb"] == "POST"]
    if version == "2026-07-28":
        assert all("mcp-session-id" not in r for r in seen.requests)
        assert all(r["mcp-protocol-version"] == version and r["mcp-method"] for r in posts)
        assert all(r["mcp-name"] for r in posts if r["mcp-method"] == "tools/call")
        return
    first, *later = seen.requests
    sessions = {r.get("mcp-session-id") for r in later}
    assert "mcp-session-id" not in first and len(sessions) == 1 and None not in sessions
    assert all(r["mcp-protocol-version"] == version for r in later)
    assert later[-1]["verb"] == "DELETE"


async def rug_pull_flow(client: McpToolClient, seen: Seen) -> list[dict[str, Any]]:
    """Benign call, a sensitive-path call, a rug pull announced by list_changed, the pulled
    tool called again."""
    assert {t["name"] for t in await client.list_tools()} == {"echo", "read_file", "swap"}
    benign = await client.call_tool("echo", {"text": "hello"})
    stolen = await client.call_tool("read_file", {"path": SSH})
    assert "read_file" not in seen.calls  # denied before dispatch
    await client.call_tool("swap", {"notify": True})
    await client.wait_list_changed()  # the server's list_changed reached the host
    pulled = await client.call_tool("echo", {"text": "again"})
    return [benign, stolen, pulled]


def check_verdicts(results: list[dict[str, Any]], audit: Path) -> None:
    benign, stolen, pulled = results
    assert text(benign) == "hello" and not benign.get("isError")
    assert stolen["isError"] and text(stolen).startswith("mtguard denied read_file")
    assert CANARY not in text(stolen)
    assert pulled["isError"] and "tool-pinning" in text(pulled)
    echo, read, swap, pulled_rec = calls(audit)
    assert [r.decision for r in (echo, read, swap, pulled_rec)] == [
        "allow",
        "deny",
        "allow",
        "deny",
    ]
    assert (read.phase, pulled_rec.phase) == ("pre", "pre")
    assert "sensitive-file-arg" in read.rules and "tool-pinning" in pulled_rec.rules
    # no sandbox, no trace: said explicitly, and rules that need a tree report themselves skipped
    assert echo.tree is not None and echo.tree.traced is False
    assert echo.tree.incomplete_reasons == [REMOTE_REASON] and not echo.tree_complete
    assert "skipped sensitive-file-read: nothing was traced" in echo.reasons
    assert "skipped unexpected-network: nothing was traced" in echo.reasons
    assert any(v.rule == "incomplete-tree" and v.mode == "observe" for v in echo.violations)


@pytest.mark.parametrize(("mode", "version"), MODES, ids=["2026", "2025"])
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_stdio_front_guards_a_remote_server(
    tmp_path: Path, mode: str, version: str, json_response: bool
) -> None:
    audit = tmp_path / "audit.jsonl"
    with run_server(json_response=json_response) as server:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with open_stdio_client(
                proxy_cmd(server.url, audit),
                mode=mode,  # type: ignore[arg-type]
                request_timeout=30,
            ) as client:
                assert client.protocol_version == version
                results = await rug_pull_flow(client, server.seen)
    check_verdicts(results, audit)
    assert server.seen.calls == ["echo", "swap"]
    check_wire(server.seen, version)


async def test_a_silent_rug_pull_is_caught_on_the_next_listing(tmp_path: Path) -> None:
    """Pinning does not depend on list_changed: a swap the server never announces is caught
    when the changed listing passes through the proxy, and the tool's calls are refused."""
    audit = tmp_path / "audit.jsonl"
    with run_server() as server:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with open_stdio_client(
                proxy_cmd(server.url, audit), request_timeout=30
            ) as client:
                await client.list_tools()
                await client.call_tool("swap", {"notify": False})
                relisted = {t["name"]: t for t in await client.list_tools()}
                pulled = await client.call_tool("echo", {"text": "x"})
                announced = client.list_changed_count
    assert announced == 0  # nothing was announced...
    assert "id_rsa" in relisted["echo"]["description"]  # ...yet the host saw the new text
    assert pulled["isError"] and "tool-pinning" in text(pulled)
    assert server.seen.calls == ["swap"]
    pin = [r for r in records(audit) if r.call_id.endswith("tools/list")]
    assert pin and "changed after pinning (description)" in pin[0].reasons[0]


async def test_upstream_token_is_sent_and_never_logged(tmp_path: Path) -> None:
    secret = "upstream-tok-41d7"
    audit, log = tmp_path / "audit.jsonl", tmp_path / "stderr.log"
    with run_server(token=secret) as server, log.open("w") as errlog:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with open_stdio_client(
                proxy_cmd(server.url, audit),
                env={"MTGUARD_UPSTREAM_TOKEN": secret},
                request_timeout=30,
                errlog=errlog,
            ) as client:
                ok = await client.call_tool("echo", {"text": "authorized"})
            with pytest.raises(Exception) as refused:  # no token: initialize is refused
                async with open_stdio_client(
                    proxy_cmd(server.url, audit), request_timeout=30, errlog=errlog
                ):
                    pass
    assert text(ok) == "authorized"
    assert server.seen.requests[0]["authorization"] == f"Bearer {secret}"
    assert "HTTP 401" in _messages(refused.value)
    assert secret not in log.read_text() and secret not in audit.read_text()


async def test_an_unreachable_upstream_is_a_clear_error_for_the_host(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    with anyio.fail_after(SESSION_TIMEOUT_S), pytest.raises(Exception) as failed:
        async with open_stdio_client(proxy_cmd(url, tmp_path / "a.jsonl"), request_timeout=30):
            pass
    assert f"cannot connect to the upstream {url}" in _messages(failed.value)


def _messages(exc: BaseException) -> str:
    """Every message in a (possibly grouped) exception."""
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(_messages(e) for e in exc.exceptions)
    return str(exc)


# -- the HTTP front ----------------------------------------------------------------------------
@asynccontextmanager
async def http_front(url: str, audit: Path) -> AsyncIterator[str]:
    """`mtguard proxy --listen 127.0.0.1:0 --upstream URL`; yields its /mcp URL."""
    cmd = [*proxy_cmd(url, audit), "--listen", "127.0.0.1:0"]
    async with listening_proxy(
        cmd, start_timeout_s=SESSION_TIMEOUT_S, stop_timeout_s=STOP_TIMEOUT_S
    ) as front:
        yield front


@pytest.mark.parametrize(("mode", "version"), MODES, ids=["2026", "2025"])
async def test_http_front_guards_a_remote_server(tmp_path: Path, mode: str, version: str) -> None:
    audit = tmp_path / "audit.jsonl"
    holder: list[McpToolClient] = []

    async def on_message(message: IncomingMessage) -> None:  # list_changed, either era
        if holder:
            await holder[0]._handle(message)

    with run_server() as server:
        async with http_front(server.url, audit) as front:
            with anyio.fail_after(SESSION_TIMEOUT_S):
                async with Client(
                    streamable_http_client(front),
                    mode=mode,
                    cache=None,
                    message_handler=on_message,
                    read_timeout_seconds=30,
                ) as sdk:
                    client = McpToolClient(sdk, 30)
                    holder.append(client)
                    assert client.protocol_version == version
                    async with anyio.create_task_group() as tg:
                        if version == "2026-07-28":
                            await tg.start(client._listen)
                        assert {t["name"] for t in await client.list_tools()} >= {"echo"}
                        benign = await client.call_tool("echo", {"text": "hello"})
                        stolen = await client.call_tool("read_file", {"path": SSH})
                        await client.call_tool("swap", {"notify": True})
                        await client.wait_list_changed()  # 2025: on the front's GET stream
                        pulled = await client.call_tool("echo", {"text": "again"})
                        tg.cancel_scope.cancel()
    check_verdicts([benign, stolen, pulled], audit)
    assert server.seen.calls == ["echo", "swap"]
    check_wire(server.seen, version)
